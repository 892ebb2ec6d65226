"""A 16-bit float model's result, folded before onnxruntime sees it: each weight's constant chain
(a quantized weight's Cast -> Mul -> ..., a float16 or bfloat16 weight's Cast to float32)
computed by onnxruntime's own kernels one weight at a time, and the session given the float32
values from a file it maps, as initializers.

Why: a result of a model that computes in 16-bit floats is verified folded (verify.py: as the
user's default session computes it), and onnxruntime's ConstantFolding keeps every step of every
chain until its pass ends. rxnmap's bfloat16 variant, 21 M quantized elements behind int8 -> Cast
-> Mul -> Cast(bfloat16) -> Cast(float32): the result's default session peaked at 396 MB of
anonymous memory, the original's at 189 MB. The values are the same (the same CPU kernels fold
them, one node at a time, as folding does) and the graph onnxruntime then optimizes is the one
folding leaves, so the outputs are the default session's bit for bit (tests/test_prefold.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

# what a weight's dequantization or widening is made of; anything else is left to onnxruntime
FOLDED_OPS = frozenset({"Cast", "Mul", "Sub", "Add", "Div", "Reshape"})
_ALIGN = 4096  # payload offsets onnxruntime can map
_HALF = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, None)  # None: a type not known
GROUP_BYTES = 32 * 2**20  # float32 results folded by one session (_groups)


def prefolded_session(path: Path, settings, load):
    """A session of the model at `path` with its weights' constant chains folded here (module
    doc), opened with `load(stub_path, settings)`; None where nothing is to be folded."""
    from ..storage.skim import read_model_skipping_weights

    model = read_model_skipping_weights(path)
    graph = model.graph
    chain, wanted = _chains(graph)
    if not wanted:
        return None
    inits = {t.name: t for t in graph.initializer}
    with tempfile.TemporaryDirectory() as d:
        stub_path, data = Path(d) / "model.onnx", Path(d) / "weights.bin"
        with open(data, "wb") as out:
            folded = [_external(out, name, value) for names, nodes, sources in _groups(chain, inits, wanted)
                      for name, value in zip(names, _fold(model, nodes, sources, inits, names, path.parent))]
            dropped = {id(n) for n in chain}
            kept_nodes = [n for n in graph.node if id(n) not in dropped]
            used = {i for n in kept_nodes for i in n.input} | {o.name for o in graph.output}
            kept = [t if not _is_external(t) else _external(out, t.name, _payload(t, path.parent), t)
                    for t in graph.initializer if t.name in used]
        del graph.node[:]
        graph.node.extend(kept_nodes)
        del graph.initializer[:]
        graph.initializer.extend(kept + folded)
        stub_path.write_bytes(model.SerializeToString())
        del model
        return load(str(stub_path), settings)


def _chains(graph: onnx.GraphProto) -> tuple[list, list[str]]:
    """(the nodes of the weights' constant chains, the float32 values of theirs the rest of the
    graph reads); nothing where a node holds a subgraph (its reads are not all in `node.input`)."""
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in graph.node for a in n.attribute):
        return [], []
    overridable = {i.name for i in graph.input}
    constant = {t.name for t in graph.initializer} - overridable
    chain, types = [], {t.name: t.data_type for t in graph.initializer}
    for node in graph.node:  # in order: our files are sorted (a node after its inputs' makers)
        if node.op_type in FOLDED_OPS and node.domain in ("", "ai.onnx") and node.input and all(
                i in constant for i in node.input if i):
            chain.append(node)
            constant.update(node.output)
            to = [a.i for a in node.attribute if a.name == "to"]
            types[node.output[0]] = to[0] if node.op_type == "Cast" and to else types.get(node.input[0])
    folded = {id(n) for n in chain}
    read = {i for n in graph.node if id(n) not in folded for i in n.input}
    if {o.name for o in graph.output} & {o for n in chain for o in n.output}:
        return [], []  # an output that is a constant: left as onnxruntime makes it
    casts = {o for n in chain if n.op_type == "Cast" for o in n.output}
    wanted = [o for n in chain for o in n.output if o in read]
    if any(types.get(o) in _HALF for o in wanted):
        # a weight the graph reads in 16 bits (isnet in float16): onnxruntime's fp16 kernels
        # around a folded constant computed otherwise (0.33 apart); its own folding then
        return [], []
    # only chains with a Cast (a weight widened or dequantized) whose end the graph reads
    return (chain, wanted) if casts and wanted else ([], [])


def _groups(chain: list, inits: dict, wanted: list[str]) -> list[tuple[list[str], list, set[str]]]:
    """`wanted` in groups folded by one session each: (names, their chains' nodes in the graph's
    order, the initializers they read), each group's float32 results about GROUP_BYTES at most
    (a session per weight: 400 of them for an fp16 encoder's weights; all in one: every chain's
    steps held at once again)."""
    makers = {o: n for n in chain for o in n.output}
    order = {id(n): k for k, n in enumerate(chain)}
    groups, names, nodes, sources, size = [], [], {}, set(), 0
    for name in wanted:
        stack, cone = [name], {}
        while stack:
            node = makers.get(stack.pop())
            if node is not None and id(node) not in cone:
                cone[id(node)] = node
                stack.extend(i for i in node.input if i)
        reads = {i for n in cone.values() for i in n.input if i and i not in makers}
        elements = sum(int(np.prod(inits[r].dims, dtype=np.int64)) for r in reads)
        if names and size + 4 * elements > GROUP_BYTES:
            groups.append((names, sorted(nodes.values(), key=lambda n: order[id(n)]), sources))
            names, nodes, sources, size = [], {}, set(), 0
        names.append(name)
        nodes.update(cone)
        sources |= reads
        size += 4 * elements
    if names:
        groups.append((names, sorted(nodes.values(), key=lambda n: order[id(n)]), sources))
    return groups


def _fold(model: onnx.ModelProto, nodes: list, sources: set[str], inits: dict, names: list[str],
          folder: Path) -> list[np.ndarray]:
    """`names`' values: their chains' nodes run in a session of their own, nothing optimized (each
    node's CPU kernel, as ConstantFolding runs it)."""
    import onnxruntime as ort

    tensors = [_inline(inits[s], folder) for s in sorted(sources)]
    graph = helper.make_graph(nodes, "fold", [], [helper.make_empty_tensor_value_info(n) for n in names], tensors)
    tiny = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.enable_cpu_mem_arena = False
    sess = ort.InferenceSession(tiny.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(names, {})


def _is_external(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL


def _payload(t: onnx.TensorProto, folder: Path) -> bytes:
    """An external tensor's bytes, as stored (the folder rule was checked by the caller's load)."""
    where = {e.key: e.value for e in t.external_data}
    with open(folder / where["location"], "rb") as f:
        f.seek(int(where.get("offset", 0)))
        return f.read(int(where["length"])) if "length" in where else f.read()


def _inline(t: onnx.TensorProto, folder: Path) -> onnx.TensorProto:
    if not _is_external(t):
        return t
    copied = onnx.TensorProto()
    copied.CopyFrom(t)
    del copied.external_data[:]
    copied.data_location = onnx.TensorProto.DEFAULT
    copied.raw_data = _payload(t, folder)
    return copied


def _external(out, name: str, data: np.ndarray | bytes, like: onnx.TensorProto | None = None) -> onnx.TensorProto:
    """`data` (an array, or the bytes of a tensor `like`) appended to `out` at an aligned offset,
    as an external tensor `name` there."""
    out.write(b"\0" * (-out.tell() % _ALIGN))
    start = out.tell()
    t = onnx.TensorProto()
    if like is not None:
        t.name, t.data_type = name, like.data_type
        t.dims.extend(like.dims)
    else:
        t.name, t.data_type = name, helper.np_dtype_to_tensor_dtype(data.dtype)
        t.dims.extend(data.shape)
        data = np.require(data, requirements="C").tobytes()
    out.write(data)
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", Path(out.name).name), ("offset", str(start)), ("length", str(len(data)))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t
