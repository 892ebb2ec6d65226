"""Bytes a quantized weight stores: measured after quantizing (`stored_bytes`) and predicted
from the shape alone, for `info` (`estimated_bytes`)."""

from __future__ import annotations

from ..graph_utils import ConstantSite
from .options import QuantOptions
from .rounding import Quantized, has_zero_point
from .scaled import equalized_axis, zero_points_tried
from .schemes import (RECURRENT_DQ_OPSET, choose_scheme, float16_for_tensorrt, lean_scheme, lowering_for,
                      recurrent_weight, required_opset, site_options)

def stored_bytes(qt: Quantized, lowering: str) -> int:
    """Payload bytes of the quantized form (q, scales, zero points), as both lowerings store it."""
    extra = qt.input_scale.nbytes if qt.input_scale is not None else 0
    return extra + payload_bytes(qt.q.size, qt.scale.size, qt.scale.itemsize, qt.dtype,
                                  qt.zero_point is not None, lowering)


def payload_bytes(elements: int, groups: int, scale_bytes: int, dtype: str, zero_points: bool,
                   lowering: str) -> int:
    four_bit = dtype in ("int4", "uint4")
    q_bytes = (elements + 1) // 2 if four_bit else elements
    zp_bytes = 0
    if zero_points:  # 4-bit zero points are packed under dq, one per byte under arith, float32 under scaled
        zp_bytes = (groups + 1) // 2 if four_bit and lowering in ("dq", "matmulnbits") else groups
        if lowering == "scaled":
            zp_bytes = 4 * groups
    return q_bytes + groups * scale_bytes + zp_bytes


def estimated_bytes(site: ConstantSite, options: QuantOptions, opset: int) -> int:
    """Payload bytes `site` would take when quantized with `options`, from its shape alone
    (for `info`: scales assumed to fit float16 under arith; `auto`'s int8 choice assumed lean,
    which it is unless a weight has outlier rows, with zero points for MatMul and Gemm, and int8
    for the small weights it may store as float16, which add at most 5% to the bytes; the
    opset is the one quant upgrades to; graph overhead of a few small nodes per weight not
    counted)."""
    options = site_options(site, options)
    if options.fp16 or float16_for_tensorrt(site, options):
        return 2 * site.num_elements
    opset = max(opset, required_opset(options))
    if options.lean_default and recurrent_weight(site):  # quant upgrades the model for them
        opset = max(opset, RECURRENT_DQ_OPSET)
    scheme = choose_scheme(site, options)
    lowering = lowering_for(site, options, scheme, opset)
    symmetric = options.symmetric
    if lowering in ("lean", "scaled"):  # lean: zero points where auto measures them (assumed to win)
        auto = lowering == "lean"
        scheme, lowering = lean_scheme(site, opset)
        symmetric = not (auto and lowering == "scaled" and zero_points_tried(site))
    groups = {"tensor": 1, "channel": site.shape[scheme.axis] if site.shape else 1,
              "block": site.num_elements // (scheme.block_size or 1)}[scheme.granularity]
    scale_bytes = 4 if lowering in ("dq", "matmulnbits", "scaled") else 2
    input_axis = equalized_axis(site) if lowering == "scaled" else None
    input_scales = 4 * site.shape[input_axis] if input_axis is not None else 0
    return input_scales + payload_bytes(site.num_elements, groups, scale_bytes, options.dtype,
                          has_zero_point(options.dtype, symmetric), lowering)


# -- graph construction -------------------------------------------------------------------------
