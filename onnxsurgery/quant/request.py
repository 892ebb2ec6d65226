"""What the user asked `quant` for: one frozen declaration that the Python API, the CLI's
options (cli.py builds them from the fields' metadata) and the CLI reference come from.

A field left None means "choose for me". `resolve()` turns the request into the complete
configuration the planner reads (QuantOptions), refusing contradictions there, once.
`flags()` writes a request back as command-line flags (the report page prints them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..defaults import QUANT_BLOCK_SIZE, QUANT_MIN_ELEMENTS, TENSORRT_BLOCK_SIZE
from ..errors import OptionError
from .vocabulary import GRANULARITIES, INTEGER_DTYPES, INTEGER_LOWERINGS, TARGETS

# --lowering: auto and the lowerings that fit any weight the other options allow; the rules
# choose the others per weight (a Gemm transB, a table, a target's fused forms)
CLI_LOWERINGS = ("auto", *(name for name in INTEGER_LOWERINGS if name in ("dq", "arith", "scaled")))


def _option(default, flag: str, help: str, **cli) -> dataclasses.Field:
    """A request field and how the CLI spells it: `flag` ("--x", or "--x/--no-x" for a
    three-state boolean), `help`, and click's keywords as plain data: choices, min, max,
    is_flag, multiple, metavar, shown (the default the help text names when the field's own
    is None)."""
    return field(default=default, metadata={"flag": flag, "help": help, **cli})


@dataclass(frozen=True)
class QuantRequest:
    dtype: str | None = _option(
        None, "--dtype",
        "Integer type of the stored weights. int4/uint4: 4-bit where onnxruntime runs the reader fast (a MatMul "
        "weight it fuses into MatMulNBits, a large Conv weight, an embedding table); 8-bit where it has no fast 4-bit "
        "path (small Conv weights, LSTM/GRU/RNN, MatMul/Gemm weights it does not fuse, com.microsoft ops' weights "
        "such as Attention's) and for a Gemm with transB (a classifier head), biases float16, said in the plan; "
        "--keep-quantized "
        "or an explicit --granularity/--lowering: 4-bit everywhere.", choices=INTEGER_DTYPES, shown="int8")
    granularity: str | None = _option(
        None, "--granularity",
        "One scale per tensor, per output channel, or per block of --block-size elements along the consumer's "
        "reduction axis (per channel where no block size near it divides that axis). [default: chosen per "
        "weight: per output channel (symmetric, scale after the consumer) where that is nearly as accurate as "
        "blocks, else block; channel with --levels]", choices=GRANULARITIES)
    block_size: int | None = _option(
        None, "--block-size", "Elements per block (blocks only; under --target tensorrt 64 or 128, default 128).",
        min=2, shown=QUANT_BLOCK_SIZE)
    symmetric: bool | None = _option(
        None, "--symmetric/--asymmetric",
        "Asymmetric stores a zero point per group and uses all 2^bits levels over its range. [default: chosen "
        "per weight, the one with the smaller error in the layer's output on the verification inputs; "
        "symmetric where the lean lowering applies]")
    rounding: str = _option(
        "auto", "--rounding",
        "balanced: nudge the fewest values one step so that each group's rounding errors sum to zero (no "
        "output shift from inputs with a common offset); auto: balanced for convolution weights, nearest "
        "elsewhere.", choices=("auto", "nearest", "balanced"))
    lowering: str = _option(
        "auto", "--lowering",
        "dq: DequantizeLinear (opset upgraded when the scheme needs it); arith: Cast/Mul chain, folded at "
        "session start into float weights; scaled: int8 Cast, scale after the MatMul/Gemm/Conv (one float copy "
        "at load); auto: per tensor, lean in memory and about as accurate as blocks.", choices=CLI_LOWERINGS)
    keep_quantized: bool = _option(
        False, "--keep-quantized",
        "Keep the weights quantized in memory at run time (DequantizeLinear in the graph, fused by onnxruntime "
        "into MatMulNBits for MatMul weights; opset upgraded to 21). About 0.4x the float model's memory after "
        "session creation, but a DequantizeLinear before a Conv, Gemm or LSTM runs at every inference and the "
        "fused MatMul quantizes activations to int8: choose it where memory is the limit (a browser tab, a "
        "phone), not latency or the last bit of accuracy. 4-bit weights always stay quantized.", is_flag=True)
    target: str = _option(
        "any", "--target",
        "any: standard ai.onnx ops only (loads in any runtime); onnxruntime: 4-bit MatMul weights become "
        "com.microsoft MatMulNBits with accuracy_level 4 (weights stay 4-bit, activations quantized to int8 per "
        "block inside the kernel, as onnxruntime-genai's builder does; 8-bit ones too in a decoder with a KV "
        "cache, elsewhere the default's lean form: there int8 activations cost accuracy, and the 8-bit kernel is "
        "slow in float); "
        "tensorrt: what TensorRT's ONNX parser takes: symmetric DequantizeLinear weights (int8 per channel; int4 "
        "in blocks, MatMul/Gemm only) for Conv, MatMul and Gemm, opset upgraded, int64 constants narrowed, and "
        "the output checked against onnx-tensorrt's operator list (see `check`).", choices=TARGETS)
    min_elements: int = _option(
        QUANT_MIN_ELEMENTS, "--min-elements",
        "Leave float constants with fewer elements alone (biases, norms, small kernels).", min=1)
    include: tuple[str, ...] = _option(
        (), "--include", "Only tensors whose name or consumer op matches.", multiple=True, metavar="GLOB")
    exclude: tuple[str, ...] = _option(
        (), "--exclude", "Skip tensors whose name or consumer op matches.", multiple=True, metavar="GLOB")
    levels: int | None = _option(
        None, "--levels",
        "Instead of integers: snap each weight group to N evenly spaced float values. Same file size, but it "
        "compresses far better with gzip or brotli.", min=2, max=65536)
    fp16: bool = _option(
        False, "--fp16", "Instead of integers: store float32 weights as float16, with a Cast back.", is_flag=True)

    @classmethod
    def of(cls, **options) -> "QuantRequest":
        """A request from keyword arguments, with an OptionError naming an unknown one."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise OptionError(f"unknown quant option '{unknown[0]}'; the options are {', '.join(sorted(known))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()})

    def resolve(self, runtime: str = "onnxruntime", memory: int | None = None):
        """The complete configuration (quant.options.QuantOptions) for a result that runs in
        `runtime` (--runtime) with `memory` bytes (--memory; None: this machine's): defaults
        filled in, choices left to quant marked as such,
        contradictions refused (OptionError)."""
        from .options import QuantOptions

        if self.block_size is not None and self.granularity in ("tensor", "channel"):
            raise OptionError(f"--block-size applies to blocks; --granularity {self.granularity} has none")
        stays_float = "--fp16" if self.fp16 else f"--levels {self.levels}" if self.levels else None
        if stays_float and not (self.fp16 and self.levels):  # both: QuantOptions says "alternatives"
            # what integer storage alone uses (--levels groups its values, so it keeps --granularity)
            given = {"dtype": self.dtype is not None, "symmetric": self.symmetric is not None,
                     "rounding": self.rounding != "auto", "lowering": self.lowering != "auto",
                     "granularity": self.fp16 and self.granularity is not None,
                     "block_size": self.fp16 and self.block_size is not None}
            flag = next((name for name, asked in given.items() if asked), None)
            if flag:
                spelled = " ".join(dataclasses.replace(QuantRequest(), **{flag: getattr(self, flag)}).flags())
                raise OptionError(f"{stays_float} keeps weights in floating point; {spelled} does not apply")
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        block_size = TENSORRT_BLOCK_SIZE if self.target == "tensorrt" else QUANT_BLOCK_SIZE
        for name, default in (("dtype", "int8"), ("block_size", block_size)):
            if given[name] is None:
                given[name] = default
        return QuantOptions(**given, runtime=runtime, memory=memory)

    def asked(self) -> dict:
        """The fields set to something other than their default."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    def flags(self) -> list[str]:
        """The command-line flags that ask for this request."""
        out: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flag = f.metadata["flag"]
            if "/" in flag:
                out.append(flag.split("/")[0 if value else 1])
            elif f.metadata.get("is_flag"):
                out.append(flag)
            elif f.metadata.get("multiple"):
                out.extend(x for v in value for x in (flag, v))
            else:
                out.extend((flag, str(value)))
        return out
