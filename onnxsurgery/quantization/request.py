"""What the user asked `quant` for: one frozen declaration that the Python API, the CLI's
options (cli/options.py builds them from the fields' metadata) and the CLI reference come from.

Each field declares its command-line spelling (declare.py). A field left None means "choose
for me". `resolve()` turns the request into the complete
configuration the planner reads (QuantOptions), refusing contradictions there, once.
`flags()` writes a request back as command-line flags (the report page prints them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..declare import STORE, WEIGHTS, WHERE, declared, flags_of
from ..defaults import QUANT_BLOCK_SIZE, QUANT_MIN_ELEMENTS, TENSORRT_BLOCK_SIZE
from ..errors import OptionError
from .vocabulary import GRANULARITIES, INTEGER_DTYPES, INTEGER_LOWERINGS

# --lowering: auto and the lowerings that fit any weight the other options allow; the rules
# choose the others per weight (a Gemm transB, a table, a target's fused forms)
CLI_LOWERINGS = ("auto", *(name for name in INTEGER_LOWERINGS if name in ("dq", "arith", "scaled")))
# Where the result runs (--target): vocabulary.TARGETS (what the plan may emit), and onnxruntime-web:
# standard ops (target any) verified as the WASM build computes (runtime onnxruntime-web), resolve() below.
WHERE_IT_RUNS = ("any", "onnxruntime", "onnxruntime-web", "tensorrt")


@dataclass(frozen=True)
class QuantRequest:
    dtype: str | None = declared(
        None, "--dtype", "int8 (default), uint8, int4 or uint4.", STORE,
        choices=INTEGER_DTYPES, metavar="TYPE")
    granularity: str | None = declared(
        None, "--granularity", "tensor, channel, block [default: per weight].", STORE,
        choices=GRANULARITIES, metavar="G")
    block_size: int | None = declared(
        None, "--block-size", f"Elements per block [default: {QUANT_BLOCK_SIZE}].",
        STORE, min=2, metavar="N")
    symmetric: bool | None = declared(
        None, "--symmetric/--asymmetric", "Zero points or none [default: per weight].", STORE)
    rounding: str = declared(
        "auto", "--rounding", "nearest, balanced or auto (the default).", STORE,
        choices=("auto", "nearest", "balanced"), metavar="R")
    lowering: str = declared(
        "auto", "--lowering", "dq, arith, scaled or auto (the default).", STORE, choices=CLI_LOWERINGS,
        metavar="L")
    keep_quantized: bool = declared(
        False, "--keep-quantized", "Weights stay integers in memory at run time.", WHERE, is_flag=True)
    target: str = declared(
        "any", "--target", "any, onnxruntime, onnxruntime-web, tensorrt.", WHERE, first=True,
        choices=WHERE_IT_RUNS, metavar="WHERE")
    min_elements: int = declared(
        QUANT_MIN_ELEMENTS, "--min-elements", f"Skip smaller constants [default: {QUANT_MIN_ELEMENTS}].", WEIGHTS,
        min=1, metavar="N")
    include: tuple[str, ...] = declared(
        (), "--include", "Only names or op types matching. Repeatable.", WEIGHTS, multiple=True, metavar="GLOB")
    exclude: tuple[str, ...] = declared(
        (), "--exclude", "Skip names or op types matching. Repeatable.", WEIGHTS, multiple=True, metavar="GLOB")
    levels: int | None = declared(
        None, "--levels", "N float values per group instead (for gzip).", STORE, min=2, max=65536, metavar="N")
    fp16: bool = declared(
        False, "--fp16", "float16 weights instead of integers.", STORE, is_flag=True)

    @classmethod
    def of(cls, **options) -> "QuantRequest":
        """A request from keyword arguments, with an OptionError naming an unknown one."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise OptionError(f"unknown quant option '{unknown[0]}'; the options are {', '.join(sorted(known))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()})

    @property
    def stays_float(self) -> str | None:
        """The flag that keeps weights in floating point (`--fp16`, `--levels N`), None when they
        become integers: the rule every refusal of an integer-only option reads
        (quantization.options.stays_float)."""
        from .options import stays_float

        return stays_float(self.fp16, self.levels)

    def resolve(self, runtime: str = "onnxruntime", memory: int | None = None):
        """The complete configuration (quantization.options.QuantOptions) for a result that runs in
        `runtime` with `memory` bytes (--memory; None: this machine's): defaults filled in,
        choices left to quant marked as such. What only the request can tell (an option given
        that the float storage asked for makes meaningless) is refused here; ranges, choices and
        the other contradictions by QuantOptions itself. Target onnxruntime-web is target any in
        runtime onnxruntime-web (where_it_runs)."""
        from .options import QuantOptions

        target, runtime = where_it_runs(self.target, runtime)
        if self.block_size is not None and self.granularity in ("tensor", "channel"):
            raise OptionError(f"--block-size applies to blocks; --granularity {self.granularity} has none")
        if self.stays_float and not (self.fp16 and self.levels):  # both: QuantOptions says "alternatives"
            # what integer storage alone uses (--levels groups its values, so it keeps --granularity)
            given = {"dtype": self.dtype is not None, "symmetric": self.symmetric is not None,
                     "rounding": self.rounding != "auto", "lowering": self.lowering != "auto",
                     "granularity": self.fp16 and self.granularity is not None,
                     "block_size": self.fp16 and self.block_size is not None}
            flag = next((name for name, asked in given.items() if asked), None)
            if flag:
                spelled = " ".join(dataclasses.replace(QuantRequest(), **{flag: getattr(self, flag)}).flags())
                raise OptionError(f"{self.stays_float} keeps weights in floating point; {spelled} does not apply")
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        given["target"] = target
        block_size = TENSORRT_BLOCK_SIZE if target == "tensorrt" else QUANT_BLOCK_SIZE
        for name, default in (("dtype", "int8"), ("block_size", block_size)):
            if given[name] is None:
                given[name] = default
        return QuantOptions(**given, runtime=runtime, memory=memory)

    def asked(self) -> dict:
        """The fields set to something other than their default."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    def flags(self) -> list[str]:
        """The command-line flags that ask for this request."""
        return flags_of(self)


def where_it_runs(target: str, runtime: str = "onnxruntime") -> tuple[str, str]:
    """(the target the plan is made for, the runtime the result is verified as): `--target
    onnxruntime-web`, and the hidden `--runtime onnxruntime-web` beside target any, are standard
    ops (target any) computed as the WASM build computes them. The alias's one normalisation."""
    if target == "onnxruntime-web" or (target == "any" and runtime == "onnxruntime-web"):
        return "any", "onnxruntime-web"
    return target, runtime
