"""The `dq` lowering: DequantizeLinear in the graph, which onnxruntime keeps (it does not fold
it), so the integers stay in memory; it fuses DQ(int4/int8, blocks or channels, axis 0) -> MatMul
into MatMulNBits, and runs a DequantizeLinear before any other reader at every inference.

Before: W (float) -> readers
After:  Wq, scale[, zero_point] -> DequantizeLinear(axis, block_size) [-> Cast] -> readers

Opsets: per tensor from 10, per channel (`axis`) from 13, blocks and 4-bit types from 21."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter, const, int_tensor
from ..options import FLOAT_TYPES, dq_opset
from ..rounding import Quantized
from .base import Lowering, always
from .scaled import through_casts


def build_dq(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor | None:
    return emit_dq(site, qt, names, list(site.shape))


def emit_dq(site: ConstantSite, qt: Quantized, names: NameAllocator, shape: list[int]) -> gs.Tensor | None:
    """The DequantizeLinear of `qt` (of shape `shape`) for `site`'s readers, with the Cast a
    float16 or bfloat16 weight needs; None where its readers were given it directly."""
    base = site.name
    emit = Emitter(site.scope.graph, names, base)
    inputs = [int_tensor(names, f"{base}_q", qt.q, qt.dtype), const(names, f"{base}_scale", qt.scale)]
    if qt.zero_point is not None:
        inputs.append(int_tensor(names, f"{base}_zero_point", qt.zero_point, qt.dtype))
    attrs = {}
    if qt.granularity != "tensor":
        attrs["axis"] = qt.axis
    if qt.granularity == "block":
        attrs["block_size"] = qt.block_size
    out = emit("DequantizeLinear", inputs, shape=shape, **attrs)
    behind = through_casts(site)
    if behind is not None and qt.scale.dtype == np.float32:
        # a bfloat16/float16 weight read only through Casts to float32: DQ gives float32 itself,
        # and its readers take it directly (MiniLM with bfloat16 weights, --keep-quantized:
        # DQ -> Cast -> Cast at every run instead of a fused MatMulNBits, 10.8x latency)
        for node, index in behind:
            node.inputs[index] = out
        return None
    if site.onnx_dtype != onnx.TensorProto.FLOAT:
        out = emit("Cast", [out], dtype=FLOAT_TYPES[site.onnx_dtype], shape=shape, to=site.onnx_dtype)
    return out


LOWERING = Lowering("dq", "DequantizeLinear: integers kept in memory, dequantized at run time", always, build_dq,
                    min_opset=dq_opset, packed_zero_points=True)
