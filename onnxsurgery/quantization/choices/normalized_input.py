"""Whether a Conv weight's reader takes a normalization's output, read from the graph alone: the
memory rule's kept Conv then takes its lean form's integers (`dq_equalized`, memory_at_load.py).

Input-side equalization (lowerings/scaled.py) sets r from the weight's input rows only. Behind a
normalization (LayerNormalization, or its decomposition (x - mean) * (gamma / std) + beta, as
jax2tf writes it) every input channel has about the same range, so scaling the input by r moves
no activation outlier into the integers' error; behind a Relu, a HardSwish or a pooling of an
unnormalized layer it can, and there plain per-channel DequantizeLinear won (PP-OCRv6 rec,
open_nsfw, oww_embedding: docs/quantization.md). Of the zoo's 20 models with kept Convs only
magika_v3's (512x256x5x1 behind a LayerNorm over its byte embeddings) reads one (axis8)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite
from ..lowerings.weight_readers import effective_readers

# Ops that only move or reshape their data: what a normalization's output may pass through
MOVES = frozenset({"Transpose", "Slice", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Flatten"})
NORMALIZATIONS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})


def reads_normalized(site: ConstantSite) -> bool:
    """Whether every reader of `site` is a Conv whose data input is a normalization's output (module doc)."""
    readers = effective_readers(site)
    return bool(readers) and all(n.op == "Conv" and i == 1 and _normalized(n.inputs[0]) for n, i in readers)


def _normalized(tensor: gs.Tensor) -> bool:
    node = _producer(tensor)
    while node is not None and node.op in MOVES:
        node = _producer(node.inputs[0])
    if node is None:
        return False
    if node.op in NORMALIZATIONS:
        return True
    # decomposed: Add(Mul(Sub(x, mean), gamma / std), beta), beta a constant and mean computed
    if node.op != "Add" or not any(isinstance(t, gs.Constant) for t in node.inputs):
        return False
    mul = next((_producer(t) for t in node.inputs if not isinstance(t, gs.Constant)), None)
    if mul is None or mul.op != "Mul":
        return False
    subs = [p for p in map(_producer, mul.inputs) if p is not None and p.op == "Sub"]
    return any(not isinstance(sub.inputs[1], gs.Constant) for sub in subs)


def _producer(tensor: gs.Tensor) -> gs.Node | None:
    return tensor.inputs[0] if isinstance(tensor, gs.Variable) and tensor.inputs else None
