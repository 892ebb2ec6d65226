"""The lowerings: how stored integers turn back into a weight, one module each behind one small
protocol (base.Lowering: fits, min_opset, stored_bytes, float_copies, build). `--lowering`,
`--target`, `--keep-quantized`, the default's choice and a plan's records all name a lowering
that this registry answers for; nothing else tests a lowering's name for what it can do.

- dq: DequantizeLinear, kept by onnxruntime: integers in memory, dequantized at run time;
- dq_equalized: that, per output channel, the reader's input scaled first (--target tensorrt);
- dq_float: scaled's integers through DequantizeLinear and a Reshape: float MatMul, integers at load;
- dq_transposed: that, over a Gemm transB weight stored [K, N], so onnxruntime fuses it;
- arith: Cast -> Mul chain, folded at load into a float weight (any scheme, any opset);
- arith_equalized: that with scaled's input-side scales folded in (a float16 weight read in float16);
- gather: an embedding table's integer rows gathered first, dequantized after;
- scaled: int8 per output channel, the scale applied after the reader (one float copy at load);
- scaled_input: int8 per input channel of a Conv, the scales on its input (one float copy at load);
- matmulnbits: com.microsoft MatMulNBits (--target onnxruntime);
- tied: a table read by Gather and by the lm_head, int8 rows serving both;
- tied_nbits: that table once in MatMulNBits layout, read by MatMulNBits and GatherBlockQuantized
  (--target onnxruntime, 4-bit).
- embed_rows: EmbedLayerNormalization's word table, int8 rows gathered for its token ids.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..options import Scheme
from ..rounding import Quantized
from . import arith, arith_equalized, dq, dq_equalized, dq_float, dq_transposed, embed_rows, gather, matmulnbits, \
    scaled, scaled_input, tied, tied_nbits
from .base import Lowering

REGISTRY: dict[str, Lowering] = {m.LOWERING.name: m.LOWERING for m in (
    dq, dq_equalized, dq_float, dq_transposed, arith, arith_equalized, gather, scaled, scaled_input, matmulnbits, tied,
    tied_nbits, embed_rows)}


def build(site: ConstantSite, qt: Quantized, name: str, names: NameAllocator, opset: int) -> gs.Tensor | None:
    """The nodes that turn the stored integers back into the weight; returns the tensor that
    replaces it, or None when the lowering rewrote its readers instead."""
    return REGISTRY[name].build(site, qt, names, opset)


def quantized_bytes(site: ConstantSite, dtype: str, scheme: Scheme, lowering: str, zero_points: bool) -> int:
    """Payload bytes of `site` quantized as given, from its shape alone (arith: float16 scales):
    what a plan record stores (choices/records.py) and `info` estimates (quantization/estimates.py)."""
    if scheme.granularity == "tensor":
        groups = 1
    elif scheme.granularity == "channel":
        groups = site.shape[scheme.axis]
    else:
        groups = site.num_elements // scheme.block_size
    input_axis = scaled.equalized_axis(site) if REGISTRY[lowering].equalized else None
    return REGISTRY[lowering].stored_bytes(site.num_elements, groups, dtype, zero_points,
                                           input_channels=site.shape[input_axis] if input_axis is not None else 0)
