"""The gain the layer after a normalization gives a weight's output channels, from the weights
alone (issue 55): where a Gemm's or MatMul's output is normalized over its channels
(LayerNormalization, or its decomposition (x - mean) / std * gamma + beta, as torch.onnx writes
it) before the next weighted layer, channel c's error reaches that layer times gamma_c (the
common 1 / std scales every channel alike), then through what gain.py follows (a Relu, a bias)
into the next weight's slice. gain.py stops at the normalization (its readers are reductions).

oww_hey_jarvis' model.4 (128x128 Gemm, then LayerNorm, Relu and a 1x128 Gemm whose weights span
0.001-0.34) is the case: with these gains its weight error per input column is 0.94x its lean
form's per output row, 1.00x unweighted (the axis11 figure no rule could act on); its layer
output on the zoo's speech (the true activations, 40 draws of its weights) 0.93-0.95x on 35-37
of 40. Weighting by the input's mean square per column as a normalization's gamma and beta
imply it was tried and not kept: those figures correlate 0.02-0.08 with the columns' measured
mean squares (the LayerNorm before it normalizes each sample, so the columns keep the spread of
model.1's outputs, 1e3-1e5), and took the ratio to 0.96x."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, constant_values
from ..lowerings.weight_readers import effective_readers
from .gain import WEIGHTED, next_weights, slice_norms


def gains_through_norm(site: ConstantSite, channel_axis: int) -> np.ndarray | None:
    """The gain of each output channel of `site` (a 2-D weight whose channels are its reader's last
    axis) through the normalization its reader's output goes into, then the next weighted layer:
    |gamma_c| times that layer's slice norm (module docstring); None where the reader's output is
    read by anything else, or no next layer is found behind the normalization."""
    channels = site.shape[channel_axis] if site.shape else 0
    readers = effective_readers(site)
    if len(readers) != 1 or len(site.shape) != 2 or channels < 4:
        return None
    node, index = readers[0]
    if node.op not in WEIGHTED or index != 1 or len(node.outputs) != 1:
        return None
    found = _normalization(node.outputs[0])
    if found is None or found[0].shape != (channels,):
        return None
    gamma, out = found
    gains = []
    for values, axis in next_weights(out):
        if values.ndim <= axis or values.shape[axis] != channels:
            return None
        gains.append(slice_norms(values, axis))
    if not gains:
        return None
    return np.abs(gamma) * np.sqrt(np.mean(np.square(gains), axis=0))


def _normalization(tensor: gs.Variable) -> tuple[np.ndarray, gs.Variable] | None:
    """(gamma, the affine output) where `tensor` is read only by a normalization over its last axis."""
    readers = list(tensor.outputs)
    if len(readers) == 1 and readers[0].op == "LayerNormalization" and readers[0].attrs.get("axis", -1) == -1:
        node = readers[0]
        gamma = _vector(node.inputs[1]) if len(node.inputs) > 1 else None
        return (gamma, node.outputs[0]) if gamma is not None else None
    # decomposed: ReduceMean(x) and Sub(x, mean) read x; Div(Sub, std) [* gamma] [+ beta]
    subs = [n for n in readers if n.op == "Sub" and n.inputs[0] is tensor and _is_mean_of(n.inputs[1], tensor)]
    if len(subs) != 1 or any(n.op not in ("ReduceMean", "Sub") for n in readers):
        return None
    divs = [n for n in subs[0].outputs[0].outputs if n.op == "Div" and n.inputs[0] is subs[0].outputs[0]]
    if len(divs) != 1:
        return None
    out = divs[0].outputs[0]
    mul = _only_reader(out, "Mul")
    gamma = _other_vector(mul, out) if mul is not None else None
    if gamma is None:
        return None
    out = mul.outputs[0]
    add = _only_reader(out, "Add")
    if add is not None and _other_vector(add, out) is not None:
        out = add.outputs[0]
    return gamma, out


def _is_mean_of(mean: gs.Tensor, tensor: gs.Tensor) -> bool:
    producer = mean.inputs[0] if isinstance(mean, gs.Variable) and mean.inputs else None
    last = [[-1]] + ([[1]] if tensor.inputs and tensor.inputs[0].op == "Gemm" else [])  # Gemm's output is 2-D
    axes = producer.attrs.get("axes") if producer is not None else None
    if producer is not None and axes is None and len(producer.inputs) > 1:  # opset 18: axes an input
        axes = constant_values(producer.inputs[1])
    return (producer is not None and producer.op == "ReduceMean" and producer.inputs[0] is tensor
            and axes is not None and [int(a) for a in np.ravel(axes)] in last)


def _only_reader(tensor: gs.Tensor, op: str) -> gs.Node | None:
    readers = list(tensor.outputs)
    return readers[0] if len(readers) == 1 and readers[0].op == op and len(readers[0].inputs) == 2 else None


def _other_vector(node: gs.Node, tensor: gs.Tensor) -> np.ndarray | None:
    others = [t for t in node.inputs if t is not tensor]
    return _vector(others[0]) if len(others) == 1 else None


def _vector(tensor: gs.Tensor) -> np.ndarray | None:
    values = constant_values(tensor)
    if values is None or values.ndim != 1 or values.size < 2:
        return None
    values = values.astype(np.float64)
    return values if np.isfinite(values).all() else None
