"""Bytes a quantized weight stores: measured after quantizing (`stored_bytes`) and predicted
from the shape alone, for `info` (`estimated_bytes`)."""

from __future__ import annotations

from ..graph_utils import ConstantSite
from .lowerings import REGISTRY, quantized_bytes
from .lowerings.tied import scheme_for as tied_scheme
from .lowerings.zero_points import conv_zero_points_tried, zero_points_tried
from .options import QuantOptions
from .rounding import Quantized, has_zero_point
from .choices.planning import Planning, required_opset
from .choices.weights import RECURRENT_DQ_OPSET, float16_for_tensorrt, lean_scheme, recurrent_weight


def stored_bytes(qt: Quantized, lowering: str) -> int:
    """Payload bytes of the quantized form (q, scales, zero points, input scales), measured."""
    return REGISTRY[lowering].stored_bytes(qt.q.size, qt.scale.size, qt.dtype, qt.zero_point is not None,
                                           input_channels=qt.input_scale.size if qt.input_scale is not None else 0,
                                           scale_bytes=qt.scale.itemsize)


def estimated_bytes(site: ConstantSite, options: QuantOptions, opset: int, planning: Planning) -> int:
    """Payload bytes `site` would take when quantized with `options`, from its shape alone
    (for `info`: scales assumed to fit float16 under arith; `auto`'s int8 choice assumed lean,
    which it is unless a weight has outlier rows, with zero points for MatMul and Gemm, and int8
    for the small weights it may store as float16, which add at most 5% to the bytes; the
    opset is the one quant upgrades to; graph overhead of a few small nodes per weight not
    counted). `planning`: the model's planning run (choices/planning.py), which the weight's form,
    grouping and lowering are asked of."""
    options = planning.form(site, options).options
    if options.fp16 or float16_for_tensorrt(site, options):
        return 2 * site.num_elements
    opset = max(opset, required_opset(options))
    if options.lean_default and recurrent_weight(site):  # quant upgrades the model for them
        opset = max(opset, RECURRENT_DQ_OPSET)
    scheme = planning.scheme(site, options)
    lowering = planning.lowering(site, options, scheme, opset)
    symmetric = options.symmetric
    if lowering == "tied":
        scheme, symmetric = tied_scheme(site), True
    elif lowering in ("lean", "scaled"):  # lean: zero points where auto measures them (assumed to win)
        auto = lowering == "lean"
        scheme, lowering = lean_scheme(site, opset)
        symmetric = not (auto and (zero_points_tried(site, lowering)
                                   or conv_zero_points_tried(site, lowering, options.four_bit)))
    return quantized_bytes(site, options.dtype, scheme, lowering, has_zero_point(options.dtype, symmetric))
