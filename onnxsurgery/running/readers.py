"""Whether a rewrite changed only weights: the nodes that read activations (anything computed from
a graph input), counted by kind, are the input's, and at another opset each is as the input's
node was (its attributes, what it reads in each input, its integer constants).

Verification's batch-2 sample exists to catch a result that breaks a batch dimension (an opset
upgrade that fixed a Reshape to batch 1 moved MiniLM's batch-4 outputs by 8.4%). Where every
change is a weight feeding the same reader (DequantizeLinear or a Cast chain in front of the
same MatMul or Conv), the activations flow through the nodes they flowed through, and a batch
the input took the result takes too: that sample is then not run (isnet_fp16 at 1024x1024: its
batch of 2 was the costliest run of both sides). Where a kind changed (MatMulNBits for a MatMul,
a Gather's lowering) it is kept; new nodes that compute each sample alone (per_sample.py: a
Conv's zero-point Convs, a scaled MatMul's row sums) do not count. Where the opset changed, it
is kept unless every reader is as it was: an upgrade whose converter left them alone (only the
version stamp changed: vit_focus 14 -> 21 for int4) changed no definition the activations go
through, while one that rewrote a reader (an attribute made an input, a shape constant changed)
shows there. A reader that multiplies by a constant varying along a Conv's channels or a
MatMul's columns only (equalization's input scales, the lean forms' output scales: tumor_vgg16)
is not counted: it scales every sample alike at any batch (_channel_scale). Read without the
weights' payloads.
"""

from __future__ import annotations

import collections
import functools
import math
import os

import numpy as np
import onnx

from .per_sample import per_sample

# integer constants up to this many bytes are compared by value (shapes, axes, pads); larger
# ones (a table's ids) by dtype and shape: the skimmed file holds no payload of 4096 bytes or more
_SMALL_BYTES = 4096


def same_readers(reference, candidate) -> bool:
    """Whether `candidate` (a path, a ModelProto or a gs.Graph) reads activations with the
    nodes `reference` does, by kind, and where the opsets differ each as it was (module doc);
    False where either cannot be read, or holds a subgraph (If, Loop, Scan: not looked into)."""
    ours, theirs = _readers(reference), _readers(candidate)
    if ours is None or theirs is None or ours[1] != theirs[1]:
        return False
    return ours[0] == theirs[0] or ours[2]() == theirs[2]()


def _readers(model) -> tuple | None:
    """(opset, the activation readers' kinds counted, a function giving their definitions
    counted) or None (same_readers). A path's, once per file as it stands: quant asks of its
    input twice (whether the reference's batch-2 sample is wanted, then verification)."""
    if isinstance(model, (str, os.PathLike)):
        try:
            stat = os.stat(model)
            return _file_readers(os.path.abspath(model), stat.st_mtime_ns, stat.st_size)  # its folder as given
        except OSError:
            return None
    return _computed_readers(model)


@functools.lru_cache(maxsize=4)
def _file_readers(path: str, mtime_ns: int, size: int) -> tuple | None:
    return _computed_readers(path)


def _computed_readers(model) -> tuple | None:
    try:
        opset, seeds, nodes, describe, shape_of, attributes = _graph(model)
    except Exception:  # noqa: BLE001 - unreadable: the sample is kept
        return None
    if any(node[4] for node in nodes):
        return None
    readers: dict[str, list[int]] = collections.defaultdict(list)  # value -> the nodes reading it
    for index, (_, _, inputs, _, _) in enumerate(nodes):
        for name in set(inputs):
            readers[name].append(index)
    # a walk from the graph's inputs: a graph mid-rewrite need not be sorted yet
    reached, todo, flowing = set(), list(seeds), set(seeds)
    while todo:
        for index in readers.get(todo.pop(), ()):
            if index not in reached:
                reached.add(index)
                todo.extend(nodes[index][3])
                flowing.update(nodes[index][3])
    # nodes that compute each sample from that sample alone, at any batch: not readers the batch
    # can break (a channel's scale, a Conv over constant weights, two of them joined: _per_sample)
    reached -= per_sample(reached, nodes, readers, flowing, shape_of, attributes, describe)
    kinds = collections.Counter((nodes[i][0], nodes[i][1]) for i in reached)

    @functools.cache  # the counter is only read
    def definitions() -> collections.Counter:
        return collections.Counter(describe(i, flowing) for i in reached)
    return opset, tuple(sorted(kinds.items())), definitions


def _graph(model):
    """(default opset, graph input names, [(domain, op, inputs, outputs, holds a subgraph)],
    describe(node index, the names activations flow through) -> that node's definition,
    shape_of(a constant's name) -> its shape or None, attributes(node index) -> {name: value})."""
    base = None
    if isinstance(model, (str, os.PathLike)):
        from .feeds import _structure

        base, model = os.path.dirname(os.fspath(model)) or ".", _structure(model)
    if isinstance(model, onnx.ModelProto):
        return _proto_graph(model, base)
    import onnx_graphsurgeon as gs

    nodes = [(n.domain or "", n.op, [t.name for t in n.inputs], [t.name for t in n.outputs],
              any(isinstance(v, gs.Graph) or isinstance(v, list) and any(isinstance(x, gs.Graph) for x in v)
                  for v in n.attrs.values()))
             for n in model.nodes]
    order = list(model.nodes)

    def constant(t) -> object:
        if isinstance(t, gs.Constant):
            return _integers(t.dtype, t.shape, lambda: _peek(t))
        producer = t.inputs[0] if len(t.inputs) == 1 else None
        if producer is not None and producer.op == "Constant" and isinstance(producer.attrs.get("value"), gs.Constant):
            value = producer.attrs["value"]
            return _integers(value.dtype, value.shape, lambda: _peek(value))
        return "c"

    def describe(index, flowing):
        n = order[index]
        return _definition(n.domain or "", n.op, model.opset, n.attrs.items(),
                           ["" if not t.name else "a" if t.name in flowing else constant(t) for t in n.inputs])

    tensors = {t.name: t for n in order for t in n.inputs}

    def shape_of(name):
        t = tensors.get(name)
        if not isinstance(t, gs.Constant) and t is not None and len(t.inputs) == 1 and t.inputs[0].op == "Constant":
            t = t.inputs[0].attrs.get("value")
        return tuple(int(d) for d in t.shape) if isinstance(t, gs.Constant) else None

    def attributes(index):
        return {k: _plain(v) for k, v in order[index].attrs.items()}
    return (model.opset, [t.name for t in model.inputs if not isinstance(t, gs.Constant)], nodes, describe,
            shape_of, attributes)


def _proto_graph(model: onnx.ModelProto, base: str | None = None):
    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    initializers = {t.name: t for t in g.initializer}
    made = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.output}
    nodes = [(n.domain or "", n.op_type, list(n.input), list(n.output),
              any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute))
             for n in g.node]

    def constant(name) -> object:
        tensor = initializers.get(name)
        if tensor is None and name in made:
            tensor = next((a.t for a in made[name].attribute if a.name == "value" and a.type == a.TENSOR), None)
        if tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL and not _is_int(tensor.data_type):
            return "c"
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        if tensor.data_location == onnx.TensorProto.EXTERNAL:  # its location is the model folder's
            if base is None:
                return "i", tuple(int(d) for d in tensor.dims)
            return _integers(dtype, tuple(tensor.dims), lambda: onnx.numpy_helper.to_array(tensor, base))
        return _integers(dtype, tuple(tensor.dims), lambda: onnx.numpy_helper.to_array(tensor))

    def describe(index, flowing):
        n = g.node[index]
        return _definition(n.domain or "", n.op_type, opset,
                           [(a.name, onnx.helper.get_attribute_value(a)) for a in n.attribute],
                           ["" if not name else "a" if name in flowing else constant(name) for name in n.input])

    def shape_of(name):
        tensor = initializers.get(name)
        if tensor is None and name in made:
            tensor = next((a.t for a in made[name].attribute if a.name == "value" and a.type == a.TENSOR), None)
        return None if tensor is None else tuple(tensor.dims)

    def attributes(index):
        return {a.name: _plain(onnx.helper.get_attribute_value(a)) for a in g.node[index].attribute}
    return (opset, [i.name for i in g.input if i.name not in initializers], nodes, describe, shape_of,
            attributes)


def _definition(domain: str, op: str, opset, attributes, inputs: list) -> tuple:
    """A reader's definition: its attributes and its inputs, each under its name in the op's
    schema at `opset` (by position where there is none), so that an attribute the converter made
    an input of the same value (ReduceMean's axes at opset 18: vit_focus) reads the same."""
    named = [(name, _plain(value)) for name, value in attributes]
    formal = _input_names(domain, op, opset)
    for position, value in enumerate(inputs):
        if value == "":
            continue
        if position < len(formal):
            name = formal[position]
        else:
            name = f"{formal[-1]}#{position}" if formal else f"#{position}"  # variadic
        named.append((name, value))
    return domain, op, tuple(sorted(named, key=repr))


@functools.lru_cache(maxsize=1024)
def _input_names(domain: str, op: str, opset) -> tuple[str, ...]:
    try:
        schema = onnx.defs.get_schema(op, max_inclusive_version=opset or 1, domain=domain)
    except Exception:  # noqa: BLE001 - another domain's op: inputs by position
        return ()
    return tuple(i.name for i in schema.inputs)


def _is_int(data_type: int) -> bool:
    return np.issubdtype(onnx.helper.tensor_dtype_to_np_dtype(data_type), np.integer)


def _integers(dtype, shape, values) -> object:
    """An integer constant's values where small (a shape, axes), else its shape; "c" for any
    other constant (a weight: the rewrite changes those)."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        return "c"
    if not np.issubdtype(dtype, np.integer):
        return "c"
    shape = tuple(int(d) for d in shape)
    if math.prod(shape) * dtype.itemsize >= _SMALL_BYTES:
        return "i", shape
    return "i", shape, tuple(np.asarray(values()).ravel().tolist())


def _plain(value) -> object:
    """An attribute's value in a form alike from a proto and from gs (strings, numbers, tuples)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, int) for v in value):  # as the same integers given as an input
            return "i", (len(value),), tuple(value)
        return tuple(_plain(v) for v in value)
    if isinstance(value, onnx.TensorProto):
        return _plain_array(onnx.numpy_helper.to_array(value))
    if isinstance(getattr(value, "proto", None), onnx.AttributeProto):  # RawAttribute: as the proto reads
        return _plain(onnx.helper.get_attribute_value(value.proto))
    if isinstance(value, (int, float, str)) or value is None:
        return value
    if hasattr(value, "values"):  # a gs.Constant
        return _plain_array(np.asarray(_peek(value)))
    return repr(value)


def _peek(constant) -> np.ndarray:
    """A gs.Constant's values, read without loading them into it: a loaded LazyValues is
    exported as raw_data where the input held int64_data, and the written file would change."""
    values = constant._values
    return values.load() if hasattr(values, "load") else values


def _plain_array(array: np.ndarray) -> object:
    return "t", array.shape, array.dtype.str, array.tobytes()
