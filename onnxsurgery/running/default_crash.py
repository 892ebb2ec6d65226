"""A graph that onnxruntime's default session dies on at creation, which verification's own sessions
cannot meet: they turn the NchwcTransformer off (sessions.session_settings), a user's
`InferenceSession(path)` does not.

Measured on onnxruntime 1.32.0 CPU (zoo, twenty-third round: arabic-diacritizer's BiLSTM stored in
float16): a float16 Transpose with perm [1, 0, 2] whose output a MatMul reads as A, with B a float16
constant, makes a default session (ORT_ENABLE_ALL) die with signal 11 at any size (8 x 8 too). It
loads with the NchwcTransformer disabled or at ORT_ENABLE_EXTENDED, and does not crash with perm
[0, 2, 1], in float32, or with B a graph input. torch writes that Transpose after every batch_first
LSTM. The input has the same edge, so the written file is no worse than it; the report says so,
since "verified" would otherwise promise a session that the user's plain load does not give.

Read from the structure only (types of constants; no payloads)."""

from __future__ import annotations

import os

import onnx

CRASHING_VERSIONS = ("1.32.",)  # where it was measured; others are not claimed
FLOAT16 = onnx.TensorProto.FLOAT16


# onnxruntime keeps these where it folds constants (QDQ patterns): a DequantizeLinear before the MatMul
# leaves B computed, and such a file loads (`quant --lowering dq` of the model above)
NOT_FOLDED = ("DequantizeLinear", "QuantizeLinear")


def _constants(graph: onnx.GraphProto) -> dict[str, int]:
    """The element type of every tensor onnxruntime holds as a constant once it has folded: the
    initializers, Constant nodes, and the outputs of nodes that read only those (a Cast -> Mul chain:
    quant's arith and scaled lowerings), in the graph's order."""
    types = {t.name: t.data_type for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant":
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            if value is not None and n.output:
                types[n.output[0]] = value.data_type
            continue
        inputs = [i for i in n.input if i]
        if inputs and n.op_type not in NOT_FOLDED and all(i in types for i in inputs):
            to = next((a.i for a in n.attribute if a.name == "to"), None) if n.op_type == "Cast" else None
            types.update(dict.fromkeys(n.output, to if to is not None else types[inputs[0]]))
    return types


def _crashing_edge(graph: onnx.GraphProto) -> str | None:
    """The name of a MatMul in `graph` (or a subgraph) that reads a [1, 0, 2] Transpose's output
    as A and a float16 constant (as folded: _constants) as B."""
    half = {name for name, dtype in _constants(graph).items() if dtype == FLOAT16}
    swapped = {n.output[0] for n in graph.node if n.op_type == "Transpose" and n.output
               and any(a.name == "perm" and list(a.ints) == [1, 0, 2] for a in n.attribute)}
    for n in graph.node:
        if n.op_type == "MatMul" and len(n.input) == 2 and n.input[0] in swapped and n.input[1] in half:
            return n.name or n.output[0]
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                if (found := _crashing_edge(sub)) is not None:
                    return found
    return None


def default_session_crash(model: onnx.ModelProto, version: str | None = None) -> str | None:
    """None, or why this onnxruntime's default session of `model` dies at creation (one clause)."""
    if version is None:
        import onnxruntime as ort

        version = ort.__version__
    if not version.startswith(CRASHING_VERSIONS):
        return None
    found = _crashing_edge(model.graph)
    if found is None:
        return None
    return (f"a default session of this model dies at creation in onnxruntime {version} (signal 11: its "
            f"NchwcTransformer on {found}, a MatMul reading a float16 Transpose [1, 0, 2] and a float16 constant); "
            "verified with that transformer off: load it with disabled_optimizers=['NchwcTransformer']")


def kept_crash(written: onnx.ModelProto, original: onnx.ModelProto, version: str | None = None) -> str | None:
    """None, or a note for a lossless rewrite (`shrink`) whose written model a default session dies
    on: the rewrite keeps every type the graph computes, so its input dies the same way (said where
    it was checked). Nothing runs: `shrink` without --verify promises no session, and its load
    check (sessions.load_error) runs without graph optimizations, where the crash never shows."""
    if version is None:
        import onnxruntime as ort

        version = ort.__version__
    if not version.startswith(CRASHING_VERSIONS) or (found := _crashing_edge(written.graph)) is None:
        return None
    same = "as a default session of its input does" if _crashing_edge(original.graph) is not None else \
        "where its input's loads"
    return (f"a default onnxruntime {version} session of this model dies at creation (signal 11: its "
            f"NchwcTransformer on {found}, a MatMul reading a float16 Transpose [1, 0, 2] and a float16 constant), "
            f"{same}; load it with disabled_optimizers=['NchwcTransformer']")


def crash_of(model: onnx.ModelProto | str | os.PathLike) -> str | None:
    """default_session_crash of a model or a path (its structure, read once: no payloads); None
    where the file cannot be read (the session that reads it says why)."""
    from .feeds import _structure

    proto = _structure(model)
    return None if proto is None else default_session_crash(proto)


def layout_crashes(model: onnx.ModelProto | str | os.PathLike) -> bool:
    """Whether a session of `model` with the NchwcTransformer on dies here. Sessions that run the
    user's samples turn it on (sessions.session_settings' `layout`): `quant --inputs`, `shrink
    --verify --inputs` and `compare --inputs` of such a model died with signal 11 in the input's
    own session (thirty-fifth round); they run it with the transformer off instead, as every
    other comparison does."""
    return crash_of(model) is not None
