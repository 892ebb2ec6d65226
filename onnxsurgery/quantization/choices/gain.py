"""How unevenly the next layer reads a weight's output channels, from the weights alone: the
data-free part of "output effect" (issue 55). A weight's error in output channel c reaches the
model's output through whatever reads that channel next; where the next layer's weight gives a
few channels many times the gain of the rest, their rounding errors are amplified that much
and the output moves with the luck of their rounding rather than with the weight error.

silero-vad's encoder.1 convolution (64x128x3) is the case: encoder.2 reads its channels with
gains (the norms of its weight's input slices) up to 10x the median one (`concentration`), and
on speech streamed with the state carried each of its rounding choices moved the output between
0.005 and 0.034 relative L2 (per output channel symmetric, with and without input equalization,
balanced or nearest rounding; one +1 step on one element of channel 40: 0.13), where the weight
error ranked them the other way. encoder.0 and encoder.3
(concentration 2.4 and 1.8) moved within 0.0015-0.0066 whatever the form. No per-channel int8
form is safe for such a weight; float16 is (planner: choices/lean.py SENSITIVE_*).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, constant_values
from ..lowerings.weight_readers import effective_readers

# Ops that pass a channel through on its own (elementwise with a constant, activations): the
# next weighted layer behind them still reads the channel as this one wrote it, scaled.
PASS_THROUGH = ("Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "Elu",
                "Selu", "Softplus", "Mish", "Gelu", "Identity", "Cast", "BatchNormalization", "Add", "Sub",
                "Mul", "Div", "Dropout", "MaxPool", "AveragePool")
# The weighted layers: a weight's reader (its output channels are what the next one reads) and
# that next layer (`_input_axis`: which axis of its weight meets the channels).
WEIGHTED = ("Conv", "MatMul", "Gemm")


def concentration(site: ConstantSite, channel_axis: int) -> float:
    """max / median over the output channels (along `channel_axis` of `site`) of the gain the
    next weighted layer gives each (`concentration_gains`); 1.0 where nothing is said."""
    g = concentration_gains(site, channel_axis)
    median = float(np.median(g)) if g is not None else 0.0
    return float(g.max() / median) if median > 0 else 1.0


def concentration_gains(site: ConstantSite, channel_axis: int) -> np.ndarray | None:
    """The gain the next weighted layer gives each output channel of `site` (along
    `channel_axis`): the norm of that layer's weight slice reading the channel (the root mean
    square over several such layers). None where no next layer is found behind every reader,
    or the channels do not line up (nothing said)."""
    channels = site.shape[channel_axis] if site.shape else 0
    gains = []
    for node, index in effective_readers(site):  # a 16-bit weight's: those behind its Casts
        if node.op not in WEIGHTED or index != 1 or len(node.outputs) != 1:
            return None
        for values, axis in next_weights(node.outputs[0]):
            if values.ndim <= axis or values.shape[axis] != channels:
                return None
            gains.append(slice_norms(values, axis))
    if not gains or channels < 4:
        return None
    return np.sqrt(np.mean(np.square(gains), axis=0))


# Channels per slice of `slice_norms`: float64 squares of a 4096x1024 next layer, whole, were
# two 32 MB temporaries per weight measured (25 ms; 8 ms a slice at a time), the same sums
NORM_CHANNELS = 256


def slice_norms(values: np.ndarray, axis: int) -> np.ndarray:
    """The L2 norm of each slice of `values` along `axis`, summed in float64 a few channels at a
    time (each channel's sum is its own: the same bits as the whole array's)."""
    moved = np.moveaxis(values, axis, 0)
    sums = np.empty(moved.shape[0], np.float64)
    for start in range(0, moved.shape[0], NORM_CHANNELS):
        part = moved[start:start + NORM_CHANNELS]
        part = part.reshape(part.shape[0], -1).astype(np.float64)
        np.square(part, out=part)
        part.sum(1, out=sums[start:start + NORM_CHANNELS])
    return np.sqrt(sums)


def next_weights(tensor: gs.Variable, depth: int = 0) -> list[tuple[np.ndarray, int]]:
    """The constant weights of the layers that next read `tensor` as their data input, each with
    its axis that meets the channels, through PASS_THROUGH ops; [] where a reader is anything
    else (a reshape or a concatenation moves the channels: nothing is said)."""
    found = []
    for node in tensor.outputs:
        data = node.inputs[0] if node.inputs else None
        weighted = node.op in WEIGHTED and data is tensor and len(node.inputs) > 1
        weight = constant_values(node.inputs[1]) if weighted else None
        if weight is not None:
            axis = _input_axis(node, weight.ndim)
            if axis is None:
                return []
            found.append((weight, axis))
        elif node.op in PASS_THROUGH and depth < 8 and node.outputs and _passes(node, tensor):
            more = next_weights(node.outputs[0], depth + 1)
            if not more:
                return []
            found += more
        else:
            return []
    return found


def _passes(node: gs.Node, tensor: gs.Variable) -> bool:
    """Whether `node` passes `tensor` channel by channel: a unary op, or a binary one whose other
    input is a constant no larger than one value per channel (a bias, a scale)."""
    if node.op in ("Add", "Sub", "Mul", "Div"):
        others = [t for t in node.inputs if t is not tensor]
        other = constant_values(others[0]) if len(others) == 1 else None
        return other is not None and other.size <= 4096
    return node.inputs[0] is tensor


def _input_axis(node: gs.Node, rank: int) -> int | None:
    """The axis of the next layer's weight (input 1) that its data input's channels meet."""
    if node.op == "Conv" and rank >= 3 and node.attrs.get("group", 1) == 1:
        return 1
    if node.op == "MatMul" and rank == 2:
        return 0
    if node.op == "Gemm" and rank == 2 and not node.attrs.get("transA", 0):
        return 1 if node.attrs.get("transB", 0) else 0
    return None
