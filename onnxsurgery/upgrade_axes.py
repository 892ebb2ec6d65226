"""An opset upgrade that only moved `axes` attributes to Constant inputs
(upgrade_changes.moved_axes_only), applied to the gs graph already imported from the original
instead of importing the upgraded model again (opset.adopt_upgrade, `moved_axes`): the
converter's Constant nodes imported as gs's importer imports them, in the converter's order, and
each reader's `axes` attribute become that input. What the graph then exports is what a second
import of the upgraded model exports (the same nodes, tensors, order and attributes): a second
import of a model of thousands of nodes costs more than the rest of a small model's `quant`."""

from __future__ import annotations

from collections import OrderedDict

import onnx


def nodes_with_moved_axes(graph, upgraded: onnx.ModelProto) -> list | None:
    """`graph`'s new node list, its readers of moved axes changed in place, or None (nothing
    changed) where the upgraded main graph is not `graph`'s nodes plus 1-D int64 Constants each
    read as the `axes` of the next original node that lost its attribute of the same values."""
    from onnx_graphsurgeon.importers.onnx_importer import OnnxImporter

    from .upgrade_changes import _AXES_TO_INPUT, _axes_constant

    old, protos = graph.nodes, upgraded.graph.node
    names = graph.tensors()
    added: dict[str, tuple[onnx.NodeProto, list[int]]] = {}  # a new Constant's output -> (node, axes)
    order: list = []  # the new list: an old node, or a new Constant's proto
    moves: list = []  # (old node, the Constant's output name)
    i = 0
    for proto in protos:
        axes = _axes_constant(proto)
        if axes is not None and proto.output[0] not in names and proto.output[0] not in added:
            added[proto.output[0]] = (proto, axes)
            order.append(proto)
            continue
        if i >= len(old):
            return None
        node = old[i]
        if node.op != proto.op_type or node.name != proto.name or \
                [t.name for t in node.outputs] != list(proto.output):
            return None
        given = [t.name for t in node.inputs]
        if given != list(proto.input):
            # the converter's change: input 1 a new Constant of the `axes` the node had first
            if node.op not in _AXES_TO_INPUT or len(proto.input) != 2 or given != list(proto.input[:1]) or \
                    proto.input[1] not in added or not node.attrs or next(iter(node.attrs)) != "axes" or \
                    list(node.attrs["axes"]) != added[proto.input[1]][1]:
                return None
            moves.append((node, proto.input[1]))
        order.append(node)
        i += 1
    if i != len(old) or len(moves) != len(added):
        return None
    opset, domains = graph.opset, graph.import_domains
    made: dict = {}
    nodes = []
    for item in order:
        if isinstance(item, onnx.NodeProto):
            node = OnnxImporter.import_node(item, OrderedDict(), OrderedDict(), opset, domains)
            made[item.output[0]] = node.outputs[0]
            nodes.append(node)
        else:
            nodes.append(item)
    for node, name in moves:
        del node.attrs["axes"]
        node.inputs.append(made[name])
    return nodes
