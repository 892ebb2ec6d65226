"""The `dq_equalized` lowering (--target tensorrt, int8): the `dq` lowering with scaled.py's
input-side equalization, in the only form TensorRT takes a weight in: DequantizeLinear per
output channel feeding the layer.

Before: X -> MatMul / Gemm / Conv (W float32) -> Y
After:  X -> Mul(r) -> MatMul / Gemm / Conv <- DequantizeLinear(Wq, scale per output channel)

The weight is divided by r_k = (max |W_k,:|) ** EQUALIZE_ALPHA along its input axis before it is
quantized per output channel, and each reader's data input is multiplied by r instead
(X @ W = (X * r) @ (W / r)), so one outlier input row no longer sets every output channel's
scale. What TensorRT computes: its DequantizeLinear fused into the layer, as with `dq`, and a
pointwise Mul on the layer's input. Measured on task inputs (docs/benchmarks.md): ddddocr's
convolutions lose 2.8x the default's error as plain per-channel DequantizeLinear.

Limits: as scaled.py's equalization (float32 weights; readers that take an input-side scale:
MatMul B 2-D, Gemm B without transA, Conv with one group); per output channel only."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..options import Scheme, dq_opset
from ..rounding import Quantized
from .base import Lowering
from .dq import emit_dq
from .weight_readers import effective_readers_by_graph, through_casts
from .scaled import scale_input, shared_constants, equalized_axis


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    if site.onnx_dtype != onnx.TensorProto.FLOAT and through_casts(site) is None:
        return "float32 weights only (or 16-bit ones read through Casts to float32)"
    if scheme.granularity != "channel":
        return "one scale per output channel only"
    if equalized_axis(site) is None:
        return "a reader cannot take an input-side scale (grouped Conv, Gemm with transA, ...)"
    return None


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor | None:
    groups = effective_readers_by_graph(site)  # behind a 16-bit weight's Casts, emit_dq feeds them itself
    out = emit_dq(site, qt, names, list(site.shape))
    for graph, readers in groups:
        constant = shared_constants(names, site.name)  # one r per graph, whatever the readers
        for node, index in readers:
            if out is not None:
                node.inputs[index] = out  # first: scale_input reads the weight's rank from it
            if qt.input_scale is not None:
                scale_input(graph, node, qt.input_scale, names, site.name, constant)
    return out  # its readers read it already (replace_uses finds none left)


LOWERING = Lowering("dq_equalized", "DequantizeLinear per output channel, the reader's input times r (TensorRT)",
                    fits, build, min_opset=dq_opset, equalized=True)
