"""A run's options besides what to store, one frozen group per concern, each declaring its own
command-line spelling (declare.py) for the Python API, the CLI and its reference alike:

- Decision: what decides each weight (a QuantRequest, a plan, or onnxruntime's quantize_dynamic),
  and what the deciding reads: merging first, GPTQ's calibration inputs, the memory where it runs.
- Budget: an output error or a file size to meet, weight by weight.
- Inputs: what the models run on (samples, shapes) and the outputs an error is over.
- Verification: whether the result runs before it is written, the largest error allowed, and
  the runtime it is computed as.
- Output: overwriting the input, a data file or one file.

Each command's options are one frozen object, validated once, when it is constructed:
`QuantRun` (quant_file, quant_plan and quant: the groups above; its `options` are the request
resolved once), `ShrinkRun` (shrink, shrink_file), `NpyRun` (npy_file; embed_file takes the
Output group). `X.of(**keywords)` routes the API's flat keywords (`samples=`, `dtype=`,
`in_place=`) to their groups; `X.given(run, keywords)` takes one or the other, the calling
shape of every file command. Refused here: what one group's option makes meaningless in
another's; ranges, choices and a request's own contradictions are the value types' own
(QuantOptions, QuantRequest.resolve, click's ranges from the declared fields).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .defaults import MERGE_MIN_ELEMENTS
from .declare import CHECKS, OUTPUT, STORE, WEIGHTS, WHERE, declared, flags_of
from .errors import OptionError
from .quantization.request import QuantRequest, where_it_runs

if TYPE_CHECKING:
    from .quantization.options import QuantOptions

PlanSource = str | os.PathLike | dict | list  # a plan's JSON file, its parsed dict, or WeightPlan records


@dataclass(frozen=True)
class Decision:
    request: QuantRequest = field(default_factory=QuantRequest)  # its fields declare their own flags
    plan: PlanSource | None = declared(
        None, "--plan", "Apply a plan (from --dry-run --json).", WEIGHTS, metavar="FILE", path=True)
    dynamic: bool = declared(False, "--dynamic", "onnxruntime's quantize_dynamic instead.", STORE, is_flag=True)
    calibration: list | None = declared(
        None, "--calibration", "Real inputs (.npz) to round for (GPTQ).", STORE, metavar="FILE", parse="samples")
    merge: bool = declared(True, "--no-merge", "Do not merge identical weights first.", WEIGHTS, parse="negate")
    memory: int | None = declared(  # bytes where it runs; None: this machine's (choices/load_memory.py)
        None, "--memory", "Its memory [default: this machine's].", WHERE, metavar="GB", parse="gigabytes")


@dataclass(frozen=True)
class Budget:
    target_error: float | None = declared(
        None, "--target-error", "Smallest file within this output error.", STORE, metavar="X", positive=True)
    target_size: int | None = declared(  # bytes of the output file
        None, "--target-size", "Smallest output error within this size.", STORE, metavar="MB", parse="megabytes")

    def __post_init__(self):
        if self.target_error is not None and self.target_size is not None:
            raise OptionError("give --target-error or --target-size, not both")

    @property
    def flag(self) -> str | None:
        """The budget's flag, None without one."""
        return next(iter(flags_of(self)), None)


@dataclass(frozen=True)
class Inputs:
    samples: list | None = declared(
        None, "--inputs", "Real inputs (.npz) [default: generated].", CHECKS, metavar="FILE", parse="samples")
    shapes: dict | None = declared(
        None, "--shape", "Fix a generated input's shape. Repeatable.", CHECKS, multiple=True, metavar="NAME:DxD",
        parse="shapes")
    outputs: tuple[str, ...] | None = declared(  # None: every output but a KV cache's present*
        None, "--outputs", "Outputs the error is over. Repeatable.", CHECKS, multiple=True, metavar="NAME",
        parse="names")


@dataclass(frozen=True)
class Verification:
    verify: bool = declared(True, "--no-verify", "Skip the onnxruntime comparison.", CHECKS, parse="negate")
    max_error: float | None = declared(
        None, "--max-error", "Write nothing above this relative L2 error.", CHECKS, metavar="X", number=True)
    # the result computed as onnxruntime-web computes it; the CLI's hidden alias of --target onnxruntime-web
    runtime: str = declared("onnxruntime", "--runtime", "Before --target onnxruntime-web: verify as that runtime "
                            "computes.", WHERE, choices=("onnxruntime", "onnxruntime-web"), hidden=True)


@dataclass(frozen=True)
class Output:
    in_place: bool = declared(False, "--in-place", "Allow the output to be the input file.", OUTPUT, is_flag=True)
    external_data: bool | None = declared(  # None: a data file where the input has one (or a KV cache)
        None, "--external-data/--one-file", "Weights in OUTPUT.data or in the .onnx.", OUTPUT)


GROUPS = {"decision": Decision, "budget": Budget, "inputs": Inputs, "verification": Verification, "output": Output}


def field_names(group) -> set[str]:
    return {f.name for f in dataclasses.fields(group)}


@dataclass(frozen=True)
class QuantRun:
    """A quant call's options, group by group (module doc): what `quant_file`, `quant_plan` and
    `quant` take. Constructing one is the command's one validation site (`__post_init__`): the
    hidden web alias normalised, every combination across groups refused, and the request
    resolved once (`options`, QuantOptions: the value type that checks its own ranges, choices
    and contradictions). `dry_run`: the run `quant_plan` makes, which writes and verifies nothing."""

    decision: Decision = field(default_factory=Decision)
    budget: Budget = field(default_factory=Budget)
    inputs: Inputs = field(default_factory=Inputs)
    verification: Verification = field(default_factory=Verification)
    output: Output = field(default_factory=Output)
    dry_run: bool = False
    options: QuantOptions = field(init=False, repr=False, compare=False)  # the request resolved, once

    def __post_init__(self):
        request = self.decision.request
        target, runtime = where_it_runs(request.target, self.verification.runtime)
        if runtime == "onnxruntime-web" and request.target == target == "any":
            # the hidden `--runtime onnxruntime-web` beside target any: the request says `--target onnxruntime-web`
            object.__setattr__(self, "decision", dataclasses.replace(
                self.decision, request=dataclasses.replace(request, target="onnxruntime-web")))
        self._refuse_combinations()
        # and the request's own contradictions, before anything is read
        object.__setattr__(self, "options", self.decision.request.resolve(runtime, self.decision.memory))

    @classmethod
    def of(cls, *, dry_run: bool = False, **keywords) -> "QuantRun":
        """The run from the API's keywords: whole groups by their names (`inputs=Inputs(...)`,
        `request=QuantRequest(...)`), or their fields one by one (`samples=`, `dtype=`), one or
        the other for a group. An unknown keyword is refused in one line naming the known ones."""
        asked = {key: keywords.pop(key) for key in list(keywords) if key in field_names(QuantRequest)}
        asked = {key: value for key, value in asked.items() if value is not None}  # None: choose for me
        if asked:  # the request's fields, one by one: the decision's request
            if keywords.get("request") is not None:
                raise OptionError(f"give a request or its options, not both ({', '.join(sorted(asked))})")
            keywords["request"] = QuantRequest.of(**asked)
        elif keywords.get("request", ...) is None:
            del keywords["request"]
        if keywords.get("outputs") is not None:
            keywords["outputs"] = tuple(keywords["outputs"])
        given = {name: keywords.pop(name, None) for name in GROUPS}
        groups = dict(zip(GROUPS, grouped("quant", keywords, also=field_names(QuantRequest), **given)))
        return cls(**groups, dry_run=dry_run)

    @classmethod
    def given(cls, run: "QuantRun | None", keywords: dict, *, dry_run: bool = False) -> "QuantRun":
        """The one calling shape of quant_file, quant_plan and quant (`given_run`), as a dry run or not."""
        return given_run(cls, run, keywords, dry_run=dry_run)

    @property
    def runtime(self) -> str:
        """What verification computes as: TensorRT for its target, else onnxruntime or its web build."""
        return "tensorrt" if self.decision.request.target == "tensorrt" else self.options.runtime

    def _refuse_combinations(self) -> None:
        """Every option that another group's makes meaningless, refused in words naming both
        (OptionError, exit 2 on the CLI)."""
        decision, request, budget = self.decision, self.decision.request, self.budget.flag
        # --target onnxruntime-web says how the result is verified, which --dynamic's is too
        flags = " ".join(flags_of(dataclasses.replace(request, target="any")) if request.target == "onnxruntime-web"
                         else flags_of(request))
        if decision.dynamic:
            if self.dry_run:
                raise OptionError("--dynamic runs onnxruntime's quantize_dynamic, which has no plan to show")
            asked = flags or budget or ("--plan" if decision.plan is not None else None) or \
                ("--calibration" if decision.calibration is not None else None)
            if asked:
                raise OptionError(f"--dynamic runs onnxruntime's quantize_dynamic, which takes none of {asked}")
        if decision.plan is not None:
            # the target stays: the plan is checked against what it takes
            asked = " ".join(flags_of(dataclasses.replace(request, target="any"))) or budget
            if asked:
                raise OptionError(f"--plan decides every weight; {asked} does not apply (edit the plan instead)")
        stays_float = request.stays_float
        if stays_float and (decision.calibration is not None or budget):
            raise OptionError(f"{stays_float} stores no integers; {budget or '--calibration'} does not apply")
        if request.target == "tensorrt" and self.verification.runtime == "onnxruntime-web":
            raise OptionError("--target tensorrt and --runtime onnxruntime-web name two runtimes; pick one "
                              "(--target onnxruntime-web)")
        if self.dry_run:
            written = flags_of(self.output) + flags_of(dataclasses.replace(self.verification, runtime="onnxruntime")) \
                + (["--outputs"] if self.inputs.outputs else [])
            if written:
                raise OptionError(f"--dry-run writes and verifies nothing; {written[0]} does not apply")
        elif self.verification.max_error is not None and not self.verification.verify:
            raise OptionError("--max-error needs the verification that --no-verify skips")


@dataclass(frozen=True)
class ShrinkRun:
    """A shrink call's options: what the passes do (shrink_pipeline), whether the result is
    verified (bit for bit) and checked for a `target`, the inputs it runs on, the output.
    Constructing one is shrink's one validation site; `of` routes the API's flat keywords."""

    min_elements: int = MERGE_MIN_ELEMENTS
    transposed: bool = False
    narrow: bool = False
    half: bool = True
    reshaped: bool = False
    verify: bool = False
    target: str | None = None  # "tensorrt": the result checked as `check` does
    inputs: Inputs = field(default_factory=Inputs)
    output: Output = field(default_factory=Output)

    def __post_init__(self):
        if self.target not in (None, "tensorrt"):
            raise OptionError(f"unknown target {self.target!r}; choose tensorrt")
        if (self.inputs.samples or self.inputs.shapes) and not self.verify:
            raise OptionError("--inputs and --shape are what --verify runs on; add --verify")
        if self.inputs.outputs is not None:
            raise OptionError("shrink verifies every output bit for bit; --outputs does not apply")

    @classmethod
    def of(cls, **keywords) -> "ShrinkRun":
        """The run from the API's keywords: its own fields, and the inputs and output groups
        given whole or field by field (`routed`)."""
        return routed(cls, "shrink", keywords)

    @classmethod
    def given(cls, run: "ShrinkRun | None", keywords: dict) -> "ShrinkRun":
        """shrink_file's and shrink's calling shape (`given_run`)."""
        return given_run(cls, run, keywords)

    @property
    def passes(self) -> dict:
        """The passes' options, as shrink_pipeline takes them."""
        return {name: getattr(self, name) for name in ("min_elements", "transposed", "narrow", "half", "reshaped")}


@dataclass(frozen=True)
class NpyRun:
    """An npy call's options: which constants move (`min_bytes`, None: 1 KB unless `names` or
    `ops` select; or only the `shared` ones), where (`npy_dir`, None: beside the output), merging
    first, and the output. Constructing one is npy's one validation site. (embed's options are
    the Output group alone.)"""

    npy_dir: str | os.PathLike | None = None
    min_bytes: int | None = None
    names: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    merge: bool = True
    min_elements: int = MERGE_MIN_ELEMENTS
    shared: bool = False
    output: Output = field(default_factory=Output)

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "ops", tuple(self.ops))
        if self.shared and (self.min_bytes is not None or self.names or self.ops):
            raise OptionError("--shared is a selection of its own; --min-bytes, --names and --ops select otherwise")

    @classmethod
    def of(cls, **keywords) -> "NpyRun":
        return routed(cls, "npy", keywords)

    @classmethod
    def given(cls, run: "NpyRun | None", keywords: dict) -> "NpyRun":
        return given_run(cls, run, keywords)


def routed(kind, command: str, keywords: dict):
    """A run of `kind` (ShrinkRun, NpyRun) from flat keywords: its own fields as they are, its
    groups (inputs, output) given whole or field by field (`grouped`); an unknown keyword
    refused in one line naming `command`'s options."""
    groups = [f.name for f in dataclasses.fields(kind) if f.name in GROUPS]
    own = {f.name for f in dataclasses.fields(kind)} - set(groups)
    mine = {key: keywords.pop(key) for key in list(keywords) if key in own}
    given = {name: keywords.pop(name, None) for name in groups}
    made = grouped(command, keywords, also=own, **given)
    return kind(**mine, **dict(zip(groups, made if len(groups) > 1 else (made,))))


def given_run(kind, run, keywords: dict, **fixed):
    """`run`, or the run `keywords` make (`kind.of`), one or the other (OptionError naming the
    keywords when both); `fixed` fields (a dry run) set on a given run where they differ."""
    if run is None:
        return kind.of(**fixed, **keywords)
    if keywords:
        raise OptionError(f"give run or its options, not both ({', '.join(sorted(keywords))})")
    differ = {name: value for name, value in fixed.items() if getattr(run, name) != value}
    return dataclasses.replace(run, **differ) if differ else run


def grouped(command: str, fields: dict, also: set[str] = frozenset(), **given):
    """The groups named in `given` (name -> the group object, or None), each built from the
    keywords in `fields` that belong to it where not given whole; an unknown keyword, or a group
    given both ways, is refused in one line. `command` names the caller in the error, `also`
    the other keywords it takes (listed there too)."""
    kinds = {name: GROUPS[name] for name in given}
    owners = {key: name for name, group in kinds.items() for key in field_names(group)}
    unknown = sorted(set(fields) - set(owners))
    if unknown:
        raise OptionError(f"unknown {command} option '{unknown[0]}'; the options are "
                          f"{', '.join(sorted({*owners, *kinds, *also}))}")
    out = []
    for name, group in kinds.items():
        mine = {key: value for key, value in fields.items() if owners[key] == name}
        if given[name] is not None and mine:
            raise OptionError(f"give {name} or its fields, not both ({', '.join(sorted(mine))})")
        out.append(given[name] if given[name] is not None else group(**mine))
    return out[0] if len(out) == 1 else tuple(out)
