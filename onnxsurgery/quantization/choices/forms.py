"""The second stage: which forms fit each weight that is not refused. Its own options and the
reason they differ from the run's (`site_form`: the budget's 4 bits, TensorRT's limits, fused
and looked-up tables, int4_paths.py's forms by reader), its grouping (`choose_scheme`) and
rounding, and whether it is stored as float16 instead of integers."""

from __future__ import annotations

import dataclasses

import onnx


from ...graph_utils import ConstantSite
from ..axes import choose_axes
from ..lowerings import REGISTRY
from ..lowerings.tied_nbits import hidden_axis as tied_hidden_axis
from ..options import TENSORRT_BLOCK_SIZES, QuantOptions, Scheme, dq_min_opset
from .candidate import Candidate, Form, PlanContext, form
from .fused_forms import fused_form
from .int4_paths import adapts, int4_form
from .model_facts import ModelFacts
from .weights import (already_quantized, balanced_rounding, float16_for_tensorrt, matmul_weight, position_table,
                      recurrent_weight, stored_in_16_bits, tensorrt_refusal)

def own_options(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """Stage 1: each weight's own options (`site_form`), and the rule's reason where one chose them."""
    forms = [(c, ctx.planning.form(c.site, ctx.options)) for c in candidates]
    return [dataclasses.replace(c, options=f.options, reason=f.reason) for c, f in forms]


def group(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """Stage 3: each weight's grouping (`choose_scheme`), and float16 instead of integers where
    the budget allocated it, a per-weight rule chose it (choices/int4_paths.py) or TensorRT takes
    no quantized form for it (weights.float16_for_tensorrt)."""
    grouped = []
    for c in candidates:
        site, opts, options = c.site, c.options, ctx.options
        float16 = site.onnx_dtype == onnx.TensorProto.FLOAT and options.allocated(site.name) == "float16"
        why = "allocated float16 by the budget" if float16 else ""
        if opts.fp16 and not options.fp16:  # a per-weight rule's float16 (choices/int4_paths.py)
            float16, why = True, c.reason
        if no_quantized_form := float16_for_tensorrt(site, opts):
            float16, why = True, no_quantized_form
        scheme = ctx.planning.scheme(site, opts)
        chosen_here = opts.lean_default or (opts.keep_quantized and opts.auto_scheme and opts.lowering == "auto")
        if not float16 and chosen_here and _vector_per_value(site, scheme):
            float16, why = True, VECTOR_FLOAT16
        grouped.append(dataclasses.replace(c, scheme=scheme, float16=float16, why=why))
    return grouped


# A vector (a bias [18710] read by an Add, PP-OCRv6 rec's classifier) "per channel" has a scale for
# each value: int8 plus a float16 scale is 3 bytes a value, kept quantized with a float32 scale and
# a zero point 6 (74.8 KB -> 112.3 KB, larger than the float32 it replaced), where float16 alone is 2
# and no less accurate. The int4 default says the same of biases (int4_paths.py).
VECTOR_FLOAT16 = "float16: a vector has no channels to share a scale (one a value: 3-6 bytes, float16's 2)"


def _vector_per_value(site: ConstantSite, scheme: Scheme) -> bool:
    """A float32 or 16-bit weight (left as it is: weights.HALF_TYPES) with at most one axis over
    1, grouped per channel along that axis."""
    return ((site.onnx_dtype == onnx.TensorProto.FLOAT or stored_in_16_bits(site)) and scheme.granularity == "channel"
            and sum(d > 1 for d in site.shape) <= 1)


def site_form(site: ConstantSite, options: QuantOptions, facts: ModelFacts) -> Form:
    """The options for `site`, with the reason where a rule changed them: 4-bit where the budget
    allocated it 4 bits (options.allocation); int8 per channel for a 4-bit weight TensorRT
    cannot take in blocks (tensorrt_int8_instead); float16 where TensorRT's int8 serves worst
    (tensorrt_float16.py); under --dtype int4 with the forms left to quant, int8 where
    onnxruntime has no fast 4-bit path for the weight's reader (int4_paths.py); else `options`."""
    if options.allocated(site.name) == "int4":
        chosen = options.as_four_bit()
        return tensorrt_int8_instead(site, chosen) or Form(chosen)
    if (int8 := tensorrt_int8_instead(site, options)) is not None:
        return int8
    if options.target == "tensorrt":
        from .tensorrt_float16 import tensorrt_float16  # this target's only: imported where it applies

        if why := tensorrt_float16(site, options, tensorrt_int8_weight, balanced_rounding, facts):
            return form(options, why, fp16=True)
        if options.dtype == "int8" and options.granularity == "channel" and options.lowering == "dq" and \
                REGISTRY["dq_equalized"].fits(site, Scheme("channel", choose_axes(site)[0]), "int8",
                                              dq_min_opset(options)) is None:
            return Form(options.changed(lowering="dq_equalized"))  # the default's equalization, as TensorRT takes it
    if (fused := fused_form(site, options)) is not None:  # com.microsoft readers, looked-up tables
        return fused
    if adapts(options) and site.shape:  # a scalar has no grouping (refusal says so)
        return int4_form(site, options, choose_scheme(site, options), recurrent_weight(site), facts)
    return Form(options)


def choose_scheme(site: ConstantSite, options: QuantOptions) -> Scheme:
    """The grouping asked for, fitted to the weight. Blocks must tile the blocked axis: when the
    block size does not divide it, the largest divisor between half the block size and the
    block size is used instead (200 input channels: blocks of 25 for 32), and when there is
    none (depthwise and 3-channel convolutions, odd widths), one scale per channel. For
    TensorRT, an axis no longer than the block size is one block: the same scales as per
    channel, in the blockwise form TensorRT documents for 4-bit weights. A 4-bit MatMul/Gemm
    weight takes the largest power of two among those divisors, where there is one."""
    channel_axis, block_axis = choose_axes(site)
    hidden = tied_hidden_axis(site)  # a tied token table: blocks along the hidden axis, which both
    if hidden is not None:  # its readers reduce over (mirrored, the readers disagree: MatMul B, Transpose)
        channel_axis, block_axis = 1 - hidden, hidden
    if options.granularity == "tensor":
        return Scheme("tensor")
    if options.granularity == "block":
        n = site.shape[block_axis]
        if options.target == "tensorrt":  # only the block sizes TensorRT takes (tensorrt_block_size)
            size = tensorrt_block_size(n, options.block_size)
            return Scheme("block", block_axis, size) if size else Scheme("channel", channel_axis)
        fitting = [b for b in range(options.block_size, (options.block_size - 1) // 2, -1) if n % b == 0]
        if options.four_bit and options.target != "tensorrt" and matmul_weight(site):
            # onnxruntime fuses 4-bit blocks of a power of two >= 16 into MatMulNBits (int4_paths.py):
            # K = 240 takes blocks of 16 rather than 30 (PP-OCRv4 rec's 240x120 weights)
            fitting = [b for b in fitting if b >= 16 and not b & (b - 1)] or fitting
        if fitting:
            return Scheme("block", block_axis, fitting[0])
    return Scheme("channel", channel_axis)


def tensorrt_block_size(n: int, asked: int) -> int | None:
    """The INT4 block size TensorRT takes for a blocked axis of `n`: the one asked for (64 or
    128), else 64 where 128 was asked and only 64 divides `n`; None where neither divides it
    (the weight then stays int8 per channel: site_form)."""
    return next((b for b in TENSORRT_BLOCK_SIZES if b <= asked and n % b == 0), None)


def tensorrt_int8_instead(site: ConstantSite, options: QuantOptions) -> Form | None:
    """Under --target tensorrt --dtype int4: int8 per channel (symmetric DequantizeLinear, which
    TensorRT takes for MatMul and Gemm too) for a 2-D MatMul/Gemm weight whose blocked axis no
    block size TensorRT takes divides (PP-OCRv4 rec's K = 240, 120); None elsewhere."""
    if options.target != "tensorrt" or not options.four_bit or options.granularity != "block" or \
            len(site.shape) != 2 or tensorrt_refusal(site, options):
        return None
    n = site.shape[choose_axes(site)[1]]
    if tensorrt_block_size(n, options.block_size) is not None:
        return None
    sizes = [b for b in TENSORRT_BLOCK_SIZES if b <= options.block_size]
    divides = f"neither {sizes[0]} nor {sizes[1]} divides" if len(sizes) > 1 else f"{sizes[0]} does not divide"
    return form(options, f"int8 per channel, not int4: TensorRT's INT4 blocks are 64 or 128, and {divides} its "
                         f"blocked axis ({n})", dtype="int8", granularity="channel")


def tensorrt_int8_weight(site: ConstantSite, options: QuantOptions) -> bool:
    """Whether TensorRT reads `site` as a quantized weight (tensorrt_refusal), and it is a weight
    at all (not a quantized model's own data, not a position table)."""
    return not (tensorrt_refusal(site, options) or already_quantized(site) or position_table(site))

