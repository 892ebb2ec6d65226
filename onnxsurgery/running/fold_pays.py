"""Whether quant's verification runs the result folded (running/verify.py, `fold_candidate=None`):
read from the original's proto alone (no payloads), so that the same model and inputs always
decide alike, whatever the machine's load.

Unfolded, a quantized weight's chain (DequantizeLinear, or Cast -> Mul) runs at every inference
and its Conv reads no constant: onnxruntime then runs plain Conv, without the blocked (NCHWc)
layout that the user's samples turn on (sessions.session_settings' `layout`). Folded, the session
pays the chains once, and the layout's copy of each Conv weight, at its creation. Measured on the
zoo's `quant --inputs` results that verification runs (tune.npz, one process each, load 5-8, CPU of
the result's session and runs): crepe_full (Conv weights 97% of its bytes) 3.97 -> 2.21 s, its two
runs 2.0 -> 0.95 s each; malviz_resnet18 and opennsfw_opset9 (all Conv) 0.04 s less; captcha_crnn
(Conv 29%, the rest LSTM and Gemm weights that folding pre-packs for four runs of 4 ms) 0.13 ->
0.24 s; models without Conv work within the noise. Without the user's samples (one generated
sample, no layout) folding never paid: 0.01-0.25 s more session for a run 0.01-0.08 s shorter
(rxnmap, isbnx_det, crepe_full, tumor_vgg16 and eight other conv nets)."""

from __future__ import annotations

import numpy as np
import onnx

# the share of the float weights' bytes that Conv nodes read, from which folding pays (module doc)
CONV_SHARE = 0.5

_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)
_PASSING = ("Cast", "Identity", "Reshape", "DequantizeLinear")  # a weight's way into its Conv


def conv_weights_dominate(model: onnx.ModelProto | None) -> bool:
    """Whether Conv nodes read at least CONV_SHARE of the float weights' bytes in `model`'s main
    graph (initializers and Constant nodes; a weight through a Cast, Identity, Reshape or
    DequantizeLinear counts as read by its Conv). False for no model or no float weights."""
    if model is None:
        return False
    g = model.graph
    sizes = {t.name: _nbytes(t) for t in g.initializer}
    sizes.update({o: _nbytes(a.t) for n in g.node if n.op_type == "Constant" for a in n.attribute
                  if a.name == "value" and a.type == onnx.AttributeProto.TENSOR for o in n.output})
    total = sum(sizes.values())
    if not total:
        return False
    producer = {o: n for n in g.node for o in n.output}
    conv = set()
    for node in g.node:
        if node.op_type != "Conv" or len(node.input) < 2:
            continue
        name = node.input[1]
        while name not in sizes and name in producer and producer[name].op_type in _PASSING:
            name = producer[name].input[0]
        if name in sizes:
            conv.add(name)
    return sum(sizes[n] for n in conv) >= CONV_SHARE * total


def _nbytes(tensor: onnx.TensorProto) -> int:
    if tensor.data_type not in _FLOATS:
        return 0
    return int(np.prod(tensor.dims, dtype=np.int64)) * (8 if tensor.data_type == onnx.TensorProto.DOUBLE else
                                                         2 if tensor.data_type != onnx.TensorProto.FLOAT else 4)
