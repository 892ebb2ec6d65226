"""A quantization plan: one record per candidate weight, saying what `quant` will do to it and why.

Planning (quant/choices/planner.py) reads the weights, and real inputs where the user gave them, and
writes nothing; applying (quant/apply.py) does what each record says and decides nothing. In
between, the plan is plain data: `quant --dry-run` prints it, `--dry-run --json` writes it,
`quant --plan FILE` applies one edited by hand or by a script, and the `--json` report of a
real run lists the records it applied under `weights`.

A record's `dtype` is what the weight is stored as:
- `int8`, `uint8`, `int4`, `uint4`: integers with scales (`granularity`, `block_size`,
  `axis`, `symmetric`), turned back into float by `lowering` (quant/lowerings/);
- `float16`: stored in 2 bytes with a Cast back to float32 (lowering `cast`);
- `float`: left as it is (lowering None), or, with lowering `levels`, its values snapped to
  `levels` evenly spaced values per group (same storage, compresses better).

`bytes_after` is planned from the record and the shape: integers, scales (float16 under
`arith`, float32 elsewhere) and zero points, not the few small nodes each lowering adds.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
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
                "weights": [asdict(w) for w in self.weights]}


_FIELDS = {f.name: f for f in fields(WeightPlan)}
_REQUIRED = ("name", "dtype")
_INTEGER_REQUIRED = ("granularity", "symmetric", "lowering")


def read_plan(source: str | os.PathLike | dict) -> list[WeightPlan]:
    """The records of a plan file (or its parsed JSON), checked for form: each needs `name` and
    `dtype`, integers also `granularity`, `symmetric` and `lowering` (and `block_size` for
    blocks); unknown keys and values are refused with one line naming the weight. Whether a
    record fits its weight is checked against the graph when applied (planner.check_record)."""
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
        if entry.get("dtype") in INTEGER_DTYPES:
            missing += [k for k in _INTEGER_REQUIRED if entry.get(k) is None]
            if entry.get("granularity") == "block" and entry.get("block_size") is None:
                missing.append("block_size")
        if missing:
            raise PlanError(f"{where}: missing '{missing[0]}'")
        if name in seen:
            raise PlanError(f"{where}: listed twice")
        seen.add(name)
        record = WeightPlan(**{"consumers": [], "shape": [], **entry})
        _check_values(record, where)
        records.append(record)
    return records


def _check_values(r: WeightPlan, where: str) -> None:
    for key, value, choices in (("dtype", r.dtype, DTYPES), ("granularity", r.granularity, (None, *GRANULARITIES)),
                                ("rounding", r.rounding, (None, *ROUNDINGS))):
        if value not in choices:
            raise PlanError(f"{where}: {key} {value!r} is not one of {', '.join(c for c in choices if c)}")
    lowerings = {"float16": ("cast", None), "float": (None, "levels")}.get(r.dtype, INTEGER_LOWERINGS)
    if r.lowering not in lowerings:
        raise PlanError(f"{where}: lowering {r.lowering!r} does not store {r.dtype}; "
                        f"choose {', '.join(str(x) for x in lowerings)}")
    for key, value, low, high in (("block_size", r.block_size, 2, None), ("levels", r.levels, 2, 65536)):
        if value is not None and not (type(value) is int and value >= low and (high is None or value <= high)):
            raise PlanError(f"{where}: {key} must be an integer from {low}" + (f" to {high}" if high else ""))
    if r.lowering == "levels" and (r.levels is None or r.granularity is None):
        raise PlanError(f"{where}: lowering levels needs 'levels' and 'granularity'")
    if r.symmetric is not None and not isinstance(r.symmetric, bool):
        raise PlanError(f"{where}: symmetric must be true or false")
    if r.axis is not None and type(r.axis) is not int:
        raise PlanError(f"{where}: axis must be an integer")


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
    named = [w for w in kept if w not in small and not w.why.startswith(counted)]  # the notes count those
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
