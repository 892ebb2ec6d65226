"""The input's node order, kept by the commands that change no node's computation (`npy`, `embed`).

Every pipeline ends in gs's topological sort (node_order.py), which orders nodes by depth: where
the exporter interleaved two branches (torch writes a Reshape, then a ReduceMin of its output,
then the next Reshape), the sort moves nodes of one depth together. onnxruntime's graph
optimizer walks the nodes in list order, so the same graph in another order can be fused
otherwise and compute outputs that differ in the last bit: EfficientWord-Net's ResNet-50 (the
zoo's effword_resnet50_arc) gave outputs 1.4e-7 apart after `npy` then `embed`, where `embed`
promises the model `npy` was given. Here the exported nodes are put back in the order the input
listed them, where every node is one of the input's (by its outputs) and that order is still
topological; otherwise gs's order stays.

Limits: the main graph only, and not where a node holds a subgraph (the values a body reads
from outer scopes would have to be followed too); such graphs keep gs's order.
"""

from __future__ import annotations

import onnx


def _key(node: onnx.NodeProto) -> tuple[str, tuple[str, ...]]:
    return node.op_type, tuple(node.output)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _topological(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> bool:
    known = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    known |= {t.name for t in graph.sparse_initializer}
    made = {o for n in nodes for o in n.output}
    for node in nodes:
        if any(i not in known and i in made for i in node.input):
            return False
        known.update(node.output)
    return True


def keep_input_order(exported: onnx.ModelProto, source: onnx.ModelProto | None) -> onnx.ModelProto:
    """`exported`'s main-graph nodes in `source`'s order (in place), where that is possible."""
    if source is None:
        return exported
    position = {_key(n): i for i, n in enumerate(source.graph.node)}
    nodes = list(exported.graph.node)
    if any(_key(n) not in position or _has_subgraph(n) for n in nodes):
        return exported
    ordered = sorted(nodes, key=lambda n: position[_key(n)])
    if [_key(n) for n in ordered] == [_key(n) for n in nodes] or not _topological(exported.graph, ordered):
        return exported
    del exported.graph.node[:]
    exported.graph.node.extend(ordered)
    return exported
