"""The `scaled_input` lowering: a Conv weight quantized per input channel (axis 1), its scales
multiplying the Conv's data input instead of the weight, kept lean (no DequantizeLinear at run time).

Before: X -> Conv(W float32, B) -> Y
After:  X -> Mul(s per input channel) -> Conv(Cast(q), B) -> Y' -> Sub(T) -> Y
        T = window_ones(Conv1x1(X * s, z per input channel)): the zero points' term, one channel
        broadcast over the output channels (absent when symmetric)

Why: with W[o, c, k] = s_c * (q[o, c, k] - z_c), Conv(X, W) = Conv(X * s, q) - Conv(X * s, z),
and the second Conv's kernel is the same for every output channel: the input's channels weighted
by z, then a window of ones with the reader's strides, pads and dilations (conv_zero_point.py's
window). Per input channel is the axis onnx-shrink-ray picks for some Convs (crepe's), which the
lean `scaled` form (per output channel, input rows equalized) cannot take and DequantizeLinear
before the Conv holds at 2.4-3.4x a 64x1 Conv's latency (load_memory.KEPT_CONV_TAPS). At load: one
Cast folded (one float copy, as `scaled`); at run time a Mul of the input, a one-channel Conv and
its window, and a Sub.

Limits: int8, float32 weights read as W by one-group Convs only (channel_axis.py chooses it)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter
from ..options import Scheme
from ..rounding import Quantized
from .base import Lowering
from .conv_zero_point import window_sum
from .scaled import scale_input, shared_constants
from .weight_readers import effective_readers, effective_readers_by_graph

AXIS = 1  # the Conv weight's input channels


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    if site.onnx_dtype != onnx.TensorProto.FLOAT:
        return "float32 weights only"
    if dtype != "int8" or scheme.granularity != "channel" or scheme.axis != AXIS:
        return "int8 with one scale per input channel (axis 1) only"
    readers = effective_readers(site)
    if len(site.shape) < 3 or not readers or any(
            node.op != "Conv" or index != 1 or node.attrs.get("group", 1) != 1 or node.inputs[0] is site.value
            for node, index in readers):
        return "every reader must be a one-group Conv reading it as its weight"
    return None


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    scale = np.where(qt.scale == 0, 1, qt.scale).astype(np.float32).ravel()  # all-zero channels: q is 0 there
    stored = gs.Constant(names.new(f"{site.name}_q"), np.ascontiguousarray(qt.q))
    weight = gs.Variable(names.new(f"{site.name}__cast"), dtype=np.float32, shape=list(site.shape))
    site.scope.graph.nodes.append(gs.Node("Cast", name=names.new(f"{site.name}__Cast"),
                                          attrs={"to": onnx.TensorProto.FLOAT}, inputs=[stored], outputs=[weight]))
    spatial = [1] * (len(site.shape) - 2)
    for graph, readers in effective_readers_by_graph(site):
        constant = shared_constants(names, site.name)  # made once per graph
        for node, index in readers:
            node.inputs[index] = weight
            scale_input(graph, node, scale, names, site.name, constant, suffix="scale")
            if qt.zero_point is None:
                continue
            emit = Emitter(graph, names, site.name)
            z = qt.zero_point.astype(np.float32).reshape([1, scale.size, *spatial])
            term = window_sum(emit, constant, emit("Conv", [node.inputs[0], constant("zero_point", z)]), node)
            output = node.outputs[0]
            uncentred = gs.Variable(names.new(f"{output.name}_uncentred"), dtype=output.dtype, shape=output.shape)
            node.outputs[0] = uncentred
            graph.nodes.append(gs.Node("Sub", name=names.new(f"{site.name}__zero_point"), inputs=[uncentred, term],
                                       outputs=[output]))
    return None


LOWERING = Lowering("scaled_input", "int8 per input channel, the scales on the Conv's input: one float copy at load",
                    fits, build, float_copies=lambda granularity, zero_points: 1)
