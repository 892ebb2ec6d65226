"""Attributes that hold long lists, kept out of gs's import (`set_aside` before, `put_back` after).

An ai.onnx.ml tree ensemble keeps its trees in node attributes: luscinia's Ukrainian stress model
(a LightGBM classifier, 194 MB) is 4.85M nodes in 14 lists and no tensor at all. gs imports each
element as a Python int or float (32-36 bytes where the proto holds 4-8): its import took 21 s and
1.5 GB beside the parsed model's 1.1 GB, and every walk over node attributes then went through the
lists, for values no pass reads or changes. Such an attribute is popped from its NodeProto before
gs imports the graph (a pop from a parsed message moves it, no copy) and comes back in the gs
node's attributes, in its place, as a RawAttribute: the exporter writes the AttributeProto as it
was. The NodeProtos of the model given lose those attributes: callers pass a model they parsed
themselves, never a user's ModelProto (pipeline.open_workspace).

Before: node.attrs["nodes_values"] == [0.5, 1.25, ...] (a list from the proto's floats).
After:  node.attrs["nodes_values"] is RawAttribute(AttributeProto nodes_values), same order.
Limits: lists of LONG_LIST elements or more only (shorter ones as gs imports them); graphs in
attributes are walked like the main graph."""

from __future__ import annotations

from collections import OrderedDict

from typing import TYPE_CHECKING

import onnx

if TYPE_CHECKING:  # imported in put_back: open_model (io.py) imports this module where no graph is made
    import onnx_graphsurgeon as gs

LONG_LIST = 65536  # elements: a 64K-node tree table and up; shapes and pads lists are a handful
_LISTS = {onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.FLOATS: "floats",
          onnx.AttributeProto.STRINGS: "strings"}


def _long(attr: onnx.AttributeProto) -> bool:
    field = _LISTS.get(attr.type)
    return field is not None and len(getattr(attr, field)) >= LONG_LIST


def set_aside(graph: onnx.GraphProto) -> list:
    """Pop every long list attribute of `graph`'s nodes (and of their subgraphs' nodes); returns
    what `put_back` needs: per node, its attributes' names in order and the popped protos."""
    aside = []
    for node in graph.node:
        order = [a.name for a in node.attribute]
        popped = {}
        for i in reversed(range(len(node.attribute))):
            if _long(node.attribute[i]):
                attr = node.attribute.pop(i)
                popped[attr.name] = attr
        inner = {a.name: set_aside(a.g) for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        aside.append((order, popped, inner))
    return aside


def put_back(aside: list, graph: gs.Graph, raw) -> None:
    """The popped attributes into `graph`'s nodes as `raw(proto)`, each in its place. gs imports
    a graph's nodes in order, so the lists pair up; where they do not (nothing set aside), nothing
    is done."""
    import onnx_graphsurgeon as gs

    if not any(popped or inner for _, popped, inner in aside) or len(aside) != len(graph.nodes):
        return
    for (order, popped, inner), node in zip(aside, graph.nodes):
        for name, sub in inner.items():
            if isinstance(node.attrs.get(name), gs.Graph):
                put_back(sub, node.attrs[name], raw)
        if not popped:
            continue
        attrs = OrderedDict((name, raw(popped[name]) if name in popped else node.attrs[name])
                            for name in order if name in popped or name in node.attrs)
        attrs.update((k, v) for k, v in node.attrs.items() if k not in attrs)
        node.attrs = attrs
