"""What `quant` is asked for (QuantOptions, validated when constructed) and how one weight is
grouped (Scheme)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import onnx

from ..defaults import QUANT_BLOCK_SIZE, QUANT_MIN_ELEMENTS, TENSORRT_BLOCK_SIZE
from ..errors import OptionError
from .vocabulary import GRANULARITIES, INTEGER_DTYPES, INTEGER_LOWERINGS, TARGETS

FLOAT_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.BFLOAT16: None,  # read through onnx; computed in float32
}
# Blocks of 32 for every dtype, chosen by measurement (docs/quantization.md): blocks of 64
# lose half of the gain over per-tensor on weights with even channel ranges.
# TensorRT's INT4 blocks: "the supported block sizes are 64 and 128" (TensorRT 10.x, "Working with
# Quantized Types" > "Quantization Schemes"); 128 by default, as NVIDIA Model Optimizer's. Blocks
# of 32 measured more accurate (MiniLM 0.244 against 0.295) but TensorRT does not take them.
TENSORRT_BLOCK_SIZES = (128, 64)  # TENSORRT_BLOCK_SIZE (defaults.py) first
ONNX_INT = {"int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8,
            "int4": onnx.TensorProto.INT4, "uint4": onnx.TensorProto.UINT4}


# What TensorRT's ONNX parser takes as a quantized weight: DequantizeLinear of int8 (per tensor
# or per channel) or int4 (also in blocks, 2-D), zero point 0, scales as initializers, feeding
# the layers TensorRT fuses it into (targets/tensorrt.py checks the output).
TENSORRT_WEIGHT_READERS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
TENSORRT_INT4_READERS = ("MatMul", "Gemm")


@dataclass
class QuantOptions:
    dtype: str = "int8"
    granularity: str | None = None  # None: chosen per weight (see `auto_scheme`)
    block_size: int | None = None  # None: QUANT_BLOCK_SIZE, TENSORRT_BLOCK_SIZE under target tensorrt
    symmetric: bool | None = None  # None: chosen per weight by measured error (see `auto_symmetric`)
    lowering: str = "auto"
    min_elements: int = QUANT_MIN_ELEMENTS
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    fp16: bool = False  # store float32 weights as float16 + Cast instead of integers
    levels: int | None = None  # snap weights to N values per group, keeping float storage
    # the budget's format per weight (api/budget.py, quantization/choices/allocation.py): name -> int4,
    # int8, float16, float32 or kept; the weights it does not name follow the options
    allocation: dict[str, str] | None = None
    rounding: str = "auto"  # nearest | balanced | auto: balanced for convolution weights
    keep_quantized: bool = False  # DequantizeLinear kept in the graph: integers in memory at run time
    target: str = "any"  # any: standard ai.onnx ops; onnxruntime: MatMulNBits; tensorrt: what its parser takes
    runtime: str = "onnxruntime"  # where the result runs (--runtime): onnxruntime-web's WASM kernels differ
    memory: int | None = None  # bytes where it runs (--memory); None: this machine's (choices/load_memory.py)

    def __post_init__(self):
        for name, value, choices in (("dtype", self.dtype, INTEGER_DTYPES),
                                     ("lowering", self.lowering, ("auto", *INTEGER_LOWERINGS)),
                                     ("target", self.target, TARGETS),
                                     ("granularity", self.granularity, (None, *GRANULARITIES)),
                                     ("rounding", self.rounding, ("auto", "nearest", "balanced"))):
            if value not in choices:
                raise OptionError(f"unknown {name} {value!r}; choose one of {', '.join(map(str, choices))}")
        if self.block_size is None:
            self.block_size = TENSORRT_BLOCK_SIZE if self.target == "tensorrt" else QUANT_BLOCK_SIZE
        for name, value, low, high in (("block_size", self.block_size, 2, None), ("levels", self.levels, 2, 65536),
                                       ("min_elements", self.min_elements, 1, None)):
            if value is not None and not (isinstance(value, int) and value >= low and (high is None or value <= high)):
                raise OptionError(f"{name} must be an integer from {low}" + (f" to {high}" if high else "")
                                  + f"; got {value!r}")
        self._check_combination()
        if self.target == "tensorrt":
            self._for_tensorrt()
        # The lean lowering picks its own scheme (per channel, symmetric): only when none was asked for.
        self.auto_scheme = self.granularity is None and self.symmetric is None and not self.stays_float
        if self.granularity is None:
            self.granularity = "channel" if self.levels else "block"
        # Each weight quantized both ways keeps the more accurate (quantization/choices/symmetry.py); the
        # lean lowering is symmetric by construction. `symmetric` is then what estimates assume.
        self.auto_symmetric = self.symmetric is None and not self.stays_float
        if self.symmetric is None:
            self.symmetric = False

    def _check_combination(self) -> None:
        """Options that contradict each other within the configuration, refused for the CLI and
        the API alike (OptionError: exit 2 on the CLI). Those across a run's groups are
        run_options.QuantRun's; an option given that float storage makes meaningless,
        QuantRequest.resolve's (only the request knows what was given)."""
        stays_float = self.stays_float
        if self.fp16 and self.levels:
            raise OptionError("--fp16 and --levels are alternatives; pick one")
        if stays_float and self.dtype != "int8":
            raise OptionError(f"{stays_float} keeps weights in floating point; --dtype {self.dtype} does not apply")
        if stays_float and self.keep_quantized:
            raise OptionError(f"{stays_float} keeps weights in floating point; --keep-quantized keeps integers")
        if self.keep_quantized and self.lowering not in ("auto", "dq"):
            raise OptionError(f"--keep-quantized keeps DequantizeLinear in the graph; --lowering {self.lowering} "
                              "is folded back into float weights at load")

    def _for_tensorrt(self) -> None:
        """Fit the options to what TensorRT's parser takes (TENSORRT_WEIGHT_READERS above), or
        say which one it refuses."""
        if self.dtype not in ("int8", "int4"):
            raise OptionError(f"target tensorrt takes dtype int8 or int4 (zero point 0), not {self.dtype}")
        if self.symmetric is False:
            raise OptionError("target tensorrt needs symmetric weights: TensorRT refuses a non-zero zero point")
        if self.lowering not in ("auto", "dq", "dq_equalized"):  # dq_equalized: forms.site_form
            raise OptionError(f"target tensorrt lowers with DequantizeLinear; lowering {self.lowering!r} "
                             "emits integer arithmetic, which TensorRT refuses")
        if self.dtype == "int8" and self.granularity == "block":
            raise OptionError("target tensorrt: blocks are for int4 weights; int8 takes granularity tensor or channel")
        if (self.dtype == "int4" or self.allocated_int4) and self.block_size not in TENSORRT_BLOCK_SIZES:
            raise OptionError(f"target tensorrt: --block-size {self.block_size}: TensorRT's supported INT4 block "
                              "sizes are 64 and 128 (TensorRT 10.x, \"Working with Quantized Types\")")
        self.symmetric, self.lowering = True, "dq" if self.lowering == "auto" else self.lowering
        if self.granularity is None and not self.stays_float:
            self.granularity = "block" if self.dtype == "int4" else "channel"

    def changed(self, **changes) -> "QuantOptions":
        """dataclasses.replace, with every choice left to quant still left to it: __post_init__
        fills in granularity and symmetric, and a plain replace would pass them on as asked for
        (the budget's int8 was blocks, not the default's lean forms: ddddocr 14.9 MB against 13.7)."""
        left = dict(granularity=None if self.auto_scheme else self.granularity,
                    symmetric=None if self.auto_symmetric else self.symmetric)
        return dataclasses.replace(self, **{**left, **changes})

    def as_four_bit(self) -> "QuantOptions":
        """These options for a weight allocated 4 bits: the 4-bit dtype of the same signedness."""
        return self.changed(dtype="uint4" if self.dtype.startswith("u") else "int4", allocation=None)

    def allocated(self, name: str) -> str | None:
        """The format the budget allocated weight `name` (`allocation`), None where it did not."""
        return self.allocation.get(name) if self.allocation else None

    @property
    def allocated_int4(self) -> bool:
        """Whether the budget allocated any weight 4 bits."""
        return bool(self.allocation) and "int4" in self.allocation.values()

    @property
    def stays_float(self) -> str | None:
        """The flag keeping weights in floating point, None for integers (`stays_float`)."""
        return stays_float(self.fp16, self.levels)

    @property
    def four_bit(self) -> bool:
        return self.dtype in ("int4", "uint4")

    @property
    def stays_quantized(self) -> bool:
        """Whether `auto` lowers with DequantizeLinear (kept by onnxruntime, so the integers stay
        in memory): asked for with keep_quantized, and always for 4-bit weights, whose unpacking
        chain would otherwise be folded into several byte- and float-sized copies at load."""
        return (self.keep_quantized or self.four_bit) and not self.stays_float

    @property
    def lean_default(self) -> bool:
        """Whether `auto` chooses between the lean lowerings and the accurate chain per weight
        (int8, no scheme asked for, not kept quantized)."""
        return self.lowering == "auto" and self.auto_scheme and self.dtype == "int8" and not self.stays_quantized


@dataclass(frozen=True)
class Scheme:
    """How one weight is grouped: one scale per tensor, per channel along `axis`, or per block
    of `block_size` elements along `axis`."""

    granularity: str
    axis: int | None = None
    block_size: int | None = None

    @property
    def name(self) -> str:
        return f"block{self.block_size}" if self.granularity == "block" else self.granularity


def stays_float(fp16: bool, levels: int | None) -> str | None:
    """The "stays float" rule, computed here once: `--fp16` and `--levels N` keep weights in
    floating point, so integer-only options do not apply; the flag as refusals spell it."""
    return "--fp16" if fp16 else f"--levels {levels}" if levels else None


def dq_min_opset(opts: QuantOptions) -> int:
    """The opset at which DequantizeLinear can express the scheme asked for."""
    return dq_opset(opts.dtype, opts.granularity)


def dq_opset(dtype: str, granularity: str | None) -> int:
    """DequantizeLinear: per tensor from opset 10, `axis` from 13, `block_size` and 4-bit from 21."""
    if dtype in ("int4", "uint4") or granularity == "block":
        return 21
    return 13 if granularity == "channel" else 10

