"""The `dq` lowering: DequantizeLinear in the graph, which onnxruntime keeps (it does not fold
it), so the integers stay in memory; it fuses DQ(int4/int8, blocks or channels, axis 0) -> MatMul
into MatMulNBits, and runs a DequantizeLinear before any other reader at every inference.

Before: W (float) -> readers
After:  Wq, scale[, zero_point] -> DequantizeLinear(axis, block_size) [-> Cast] -> readers

Opsets: per tensor from 10, per channel (`axis`) from 13, blocks and 4-bit types from 21.

For TensorRT (`one_per_reader`), a weight read by several layers gets one DequantizeLinear per
reader, all reading the one integer initializer and scale (docs/limits.md says why)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter, const, int_tensor
from ..options import dq_opset
from ..rounding import Quantized
from .base import Lowering, always
from .weight_readers import feed_or_cast_back


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
    # a bfloat16/float16 weight read only through Casts to float32, with float32 scales: DQ gives
    # float32 itself, and its readers take it directly (MiniLM with bfloat16 weights,
    # --keep-quantized: DQ -> Cast -> Cast at every run instead of a fused MatMulNBits, 10.8x latency)
    return feed_or_cast_back(site, out, emit, shape, behind_casts=qt.scale.dtype == np.float32)


def one_per_reader(out: gs.Tensor, graph: gs.Graph, names: NameAllocator) -> int:
    """Give each node that reads `out` (a DequantizeLinear's output, or the Cast after it) its
    own copy of that DequantizeLinear [-> Cast], in `graph`, reading the same integer and scale
    initializers: TensorRT fuses a weight's DequantizeLinear into the layer reading it, and a
    Q/DQ pair is not shared between nodes there (onnxruntime's quantizer writes one per node
    for TensorRT, DedicatedQDQPair; Model Optimizer duplicates shared constants before it
    quantizes). The file does not grow: only nodes are added. Returns how many were added."""
    chain, tensor = [], out
    while tensor.inputs and tensor.inputs[0].op in ("Cast", "DequantizeLinear"):
        chain.insert(0, tensor.inputs[0])
        if chain[0].op == "DequantizeLinear":
            break
        tensor = chain[0].inputs[0]
    if not chain or chain[0].op != "DequantizeLinear":
        return 0
    readers = [(node, i) for node in list(out.outputs) for i, t in enumerate(node.inputs) if t is out]
    emit = Emitter(graph, names, chain[0].outputs[0].name.split("__")[0])
    for node, index in readers[1:]:
        x = None
        for step in chain:
            inputs = list(step.inputs) if x is None else [x, *step.inputs[1:]]
            x = emit(step.op, inputs, dtype=step.outputs[0].dtype, shape=step.outputs[0].shape, **step.attrs)
        node.inputs[index] = x
    return len(chain) * max(len(readers) - 1, 0)


LOWERING = Lowering("dq", "DequantizeLinear: integers kept in memory, dequantized at run time", always, build_dq,
                    min_opset=dq_opset, packed_zero_points=True)
