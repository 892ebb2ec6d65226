"""The `dq` lowering: DequantizeLinear in the graph, which onnxruntime keeps (it does not fold
it), so the integers stay in memory; it fuses DQ(int4/int8, blocks or channels, axis 0) -> MatMul
into MatMulNBits, and runs a DequantizeLinear before any other reader at every inference.

Before: W (float) -> readers
After:  Wq, scale[, zero_point] -> DequantizeLinear(axis, block_size) [-> Cast] -> readers

A Gemm reads B transposed (transB=1, [N, K]) in most exports (classifiers, torch's Linear), and
onnxruntime fuses DequantizeLinear only into a Gemm without transB: such a weight in blocks is
stored transposed, [K, N] with blocks along axis 0, and its Gemms get transB=0 (ddddocr's
8210x1024 classifier in int8 blocks: 0.71x the float model's memory and 0.87x its latency, where
DequantizeLinear into the transB Gemm ran at every inference).

Opsets: per tensor from 10, per channel (`axis`) from 13, blocks and 4-bit types from 21."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers
from ..nodes import Emitter, const, int_tensor
from ..options import FLOAT_TYPES, dq_opset
from ..rounding import Quantized
from .base import Lowering, always
from .scaled import through_casts


def transposed_gemm_readers(site: ConstantSite, qt: Quantized) -> list[gs.Node]:
    """The Gemms that read `site` as B with transB=1, where it is in blocks, 2-D and read by
    nothing else (so it can be stored transposed for them); else []."""
    readers = consumers(site)
    if qt.granularity != "block" or len(site.shape) != 2 or not readers or \
            any(o is site.value for o in site.scope.graph.outputs):
        return []
    if all(n.op == "Gemm" and i == 1 and n.attrs.get("transB", 0) for n, i in readers):
        return [n for n, _ in readers]
    return []


def transposed(qt: Quantized) -> Quantized:
    """`qt` (2-D, blocks) stored the other way round: integers, scales and zero points transposed."""
    t = lambda a: None if a is None else np.ascontiguousarray(a.T)  # noqa: E731
    return dataclasses.replace(qt, q=t(qt.q), scale=t(qt.scale), zero_point=t(qt.zero_point), axis=1 - qt.axis)


def build_dq(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor | None:
    base = site.name
    emit = Emitter(site.scope.graph, names, base)
    shape = list(site.shape)
    gemms = transposed_gemm_readers(site, qt)
    if gemms:  # stored [K, N] so that onnxruntime fuses it (module docstring)
        qt, shape = transposed(qt), shape[::-1]
        for node in gemms:
            node.attrs["transB"] = 0
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
