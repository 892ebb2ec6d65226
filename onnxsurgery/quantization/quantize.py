"""One weight's integers and scales for a settled scheme, as the lowering will store them:
`quantize_args` (the rounding's arguments: float16 scales where the lowering stores them, the
clipping search for 4-bit ranges) and `quantize_site` (under an equalizing lowering, the weight
divided by its input-side scales first). Used alike by the choices that measure candidate forms
and by apply.py."""

from __future__ import annotations

import numpy as np
import onnx

from ..graph_utils import ConstantSite
from .lowerings import REGISTRY
from .lowerings.scaled import equalizing_scales, through_casts
from .options import QuantOptions, Scheme
from .rounding import Quantized, quantize


def scheme_args(options: QuantOptions, scheme: Scheme, lowering: str, symmetric: bool | None = None,
                importance: np.ndarray | None = None) -> dict:
    """quantize()'s arguments for `scheme` under `lowering` (dq and MatMulNBits: scales of the
    output type; arith: float16 scales rounded up; scaled: float32 scales, applied at run time).
    4-bit ranges are searched for a clipping ratio (rounding.CLIP_RATIOS): 15 steps leave little
    to waste. Where `importance` is given (what each element multiplies in the layer's input,
    gptq.input_energy on the verification inputs), each element's error is weighted by it, and
    asymmetric ranges are searched too: MiniLM int4 0.243 -> 0.228, ALBERT-base's encoder 0.255
    -> 0.227 on task inputs (choices.symmetry.weighted_clipping: MatMul and Gemm weights). Without
    it only symmetric ranges are, where one outlier sets the range on both sides: unweighted,
    asymmetric ddddocr rose 0.159 -> 0.187."""
    return quantize_args(options.dtype, scheme, lowering, options.symmetric if symmetric is None else symmetric,
                         importance)


def quantize_args(dtype: str, scheme: Scheme, lowering: str, symmetric: bool,
                  importance: np.ndarray | None = None) -> dict:
    """`scheme_args` for one weight's settled dtype and symmetry (what a plan record holds)."""
    four_bit = dtype in ("int4", "uint4")
    weighted = four_bit and importance is not None
    return dict(dtype=dtype, granularity=scheme.granularity, block_size=scheme.block_size,
                symmetric=symmetric, half_scales=not REGISTRY[lowering].float_scales,
                search_clip=four_bit and (bool(symmetric) or weighted),
                importance=importance if weighted else None)


def quantize_site(values: np.ndarray, site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool, args: dict,
              equalized: bool = True) -> Quantized:
    """quantize() for `scheme`; under `scaled`, of the weight equalized along its input axis
    first (scaled.equalize), unless `equalized` is False (GPTQ rounds the weight as it is)."""
    if REGISTRY[lowering].equalized and site.onnx_dtype == onnx.TensorProto.FLOAT16 and through_casts(site) is None:
        args = {**args, "half_scales": True}  # scaled applies the scales in the weight's float16
    if not REGISTRY[lowering].equalized or not equalized:
        return quantize(values, axis=scheme.axis, balanced=balanced, **args)
    r, input_axis = equalizing_scales(values, site)
    if r is None:
        return quantize(values, axis=scheme.axis, balanced=balanced, **args)
    along = [1] * values.ndim
    along[input_axis] = -1
    # values / r, divided as quantize goes (what equalize returns, without a full-size copy)
    qt = quantize(values, axis=scheme.axis, balanced=balanced, divisor=r.reshape(along), **args)
    qt.input_scale, qt.input_axis = r, input_axis
    return qt
