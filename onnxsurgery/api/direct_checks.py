"""What shrink_direct.py asks of a graph before it takes it (api/shrink_direct.py's module doc):
that gs would write back every node, input, output and value_info entry as it is, that no pass
but the merge of initializers has anything to do, that cleanup would remove nothing; and gs's
toposort order, the exporter's initializer order and its value_info order, on the proto's names."""

from __future__ import annotations

import onnx

# AttributeProto types gs reads into Python values and writes back as they were
_PLAIN = {onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT, onnx.AttributeProto.STRING,
          onnx.AttributeProto.FLOATS, onnx.AttributeProto.INTS, onnx.AttributeProto.STRINGS}
_REPEATED = {onnx.AttributeProto.FLOATS: "floats", onnx.AttributeProto.INTS: "ints",
             onnx.AttributeProto.STRINGS: "strings"}


class NotCovered(Exception):
    """The model needs the graph's path."""


def elements(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def check_plain(model: onnx.ModelProto, min_elements: int) -> None:
    """NotCovered unless the graph is one a default `shrink` changes only by merging initializers,
    and gs would write back every node, input and output as it is (module doc)."""
    g = model.graph
    if model.functions or model.training_info or g.sparse_initializer or model.ir_version < 4:
        raise NotCovered("functions, training info, sparse initializers or IR < 4")
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        raise NotCovered("no default opset")
    for node in g.node:
        if node.HasField("overload"):  # a node's doc string and metadata: gs drops them, as _shrink does
            raise NotCovered(f"node {node.name}: an overload")
        for a in node.attribute:
            if a.doc_string or a.ref_attr_name:
                raise NotCovered(f"node {node.name}: attribute {a.name} with a doc string or reference")
            if a.type in _PLAIN:
                if a.type in _REPEATED and not len(getattr(a, _REPEATED[a.type])):
                    raise NotCovered(f"node {node.name}: empty attribute {a.name}")
                continue
            # a small tensor (a Constant's, ConstantOfShape's value): gs keeps the proto and writes it
            # back; below min_elements no pass takes it
            if (not node.domain and a.type == a.TENSOR and a.t.HasField("raw_data")
                    and elements(a.t) < min_elements and a.t.data_location != onnx.TensorProto.EXTERNAL):
                continue
            raise NotCovered(f"node {node.name}: attribute {a.name} of type {a.type}")
    for v in (*g.input, *g.output, *g.value_info):
        check_value_info(v)


def check_value_info(v: onnx.ValueInfoProto) -> None:
    """NotCovered unless gs reads `v` into a dtype and a shape that its exporter writes back as the
    same bytes (make_tensor_value_info): a plain tensor of a known type, each dimension a number, a
    name or neither (gs's None, written back empty), no denotation or doc string."""
    if v.doc_string or not v.type.HasField("tensor_type") or v.type.denotation or len(v.metadata_props):
        raise NotCovered(f"value {v.name} not a plain tensor")
    t = v.type.tensor_type
    if not t.elem_type or any(d.denotation for d in t.shape.dim):
        raise NotCovered(f"value {v.name}: a type gs would write back otherwise")


def described(g: onnx.GraphProto, inits: dict, outs: list) -> dict[str, onnx.ValueInfoProto]:
    """The value_info entries the exporter writes back, by name: those of values a node makes (it
    drops an initializer's, a merged one's too, a graph input's or output's, and one of a value
    nothing makes); NotCovered where one names a graph input or output and says otherwise (gs
    reads it into their types) or a value twice (gs merges the two)."""
    entries = {v.name: v for v in g.value_info}
    if len(entries) != len(g.value_info):
        raise NotCovered("a value described twice")
    made = {name for names in outs for name in names}
    for v in (*g.input, *g.output):  # gs reads one into the declaration, then drops it
        if v.name in entries and entries.pop(v.name).SerializeToString() != v.SerializeToString():
            raise NotCovered(f"value_info of graph input or output {v.name}")
    return {name: v for name, v in entries.items() if name in made}


def check_shape_readers(g: onnx.GraphProto, ins: list, inits: dict) -> None:
    """NotCovered where a Shape node reads a constant (shape_only's work); of a computed value it
    leaves the Shape alone."""
    constants = set(inits)
    constants.update(name for node in g.node if node.op_type == "Constant" for name in node.output)
    for node, names in zip(g.node, ins):
        if node.op_type == "Shape" and names and names[0] in constants:
            raise NotCovered(f"node {node.name}: Shape of a constant")


def check_names(g: onnx.GraphProto, ins: list, outs: list) -> dict[str, onnx.TensorProto]:
    """The initializers by name; NotCovered where names collide, an initializer is an input or
    output, unread, or a node is dead (cleanup would remove it). `ins`, `outs`: each node's
    input and output names (the protos' repeated fields read once: each read costs)."""
    inits = {t.name: t for t in g.initializer}
    inputs = {v.name for v in g.input}
    outputs = {v.name for v in g.output}
    if len(inits) != len(g.initializer) or len(inputs) != len(g.input) or inits.keys() & (inputs | outputs):
        raise NotCovered("an initializer is named twice, or is a graph input or output")
    produced: set[str] = set()
    for names in outs:
        for name in names:
            if name and (name in produced or name in inits or name in inputs):
                raise NotCovered(f"tensor {name} named twice")
            produced.add(name)
    if inits.keys() - {name for names in ins for name in names}:
        raise NotCovered("an initializer nobody reads")
    live = set(outputs)
    for i in reversed(sorted_nodes(ins, outs)):
        if live.isdisjoint(outs[i]):
            raise NotCovered(f"node {g.node[i].name} is dead")
        live.update(name for name in ins[i] if name)  # "": an optional input left out, not a tensor
    return inits


def sorted_nodes(ins: list, outs: list) -> list[int]:
    """The nodes' indices in gs's toposort order: by depth (1 + the deepest producer of an input,
    0 for none), stable."""
    producer = {name: i for i, names in enumerate(outs) for name in names if name}
    level: dict[int, int] = {}

    def depth(i: int) -> int:
        stack, on_stack = [i], set()
        while stack:
            j = stack[-1]
            if j in level:
                stack.pop()
                continue
            on_stack.add(j)
            todo = [p for name in ins[j] if (p := producer.get(name)) is not None and p not in level]
            if any(p in on_stack for p in todo):
                raise NotCovered("a cycle")
            if todo:
                stack.extend(todo)
                continue
            level[j] = 1 + max((level[p] for name in ins[j] if (p := producer.get(name)) is not None), default=-1)
            on_stack.discard(j)
            stack.pop()
        return level[i]

    for i in range(len(ins)):  # in one pass where every producer comes first (the usual file)
        depths = [level.get(producer.get(name, -1), -2) for name in ins[i] if name in producer]
        if -2 in depths:
            break
        level[i] = 1 + max(depths, default=-1)
    return sorted(range(len(ins)), key=depth)


def first_use(ins: list, inits: dict) -> list[str]:
    """Initializer names in the order of their first reader (collect_constants' order)."""
    seen: dict[str, None] = {}
    for names in ins:
        for name in names:
            if name in inits:
                seen.setdefault(name)
    return list(seen)
