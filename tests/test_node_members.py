"""node_members.all_in_graph: the set of a graph's node ids kept across questions, and the edits
that must not let it answer for another graph (readers_by_graph places a lowering's nodes by it)."""

import numpy as np
import onnx_graphsurgeon as gs

from onnxsurgery.graph_utils import collect_constants, readers_by_graph
from onnxsurgery.node_members import all_in_graph


def _node(op="Relu"):
    return gs.Node(op, inputs=[gs.Variable("x")], outputs=[gs.Variable("y")])


def test_appended_nodes_are_found():
    a, b = _node(), _node()
    graph = gs.Graph(nodes=[a])
    assert all_in_graph(graph, [a])
    assert not all_in_graph(graph, [b])
    graph.nodes.append(b)  # the lowerings' way to add a node
    assert all_in_graph(graph, [a, b])


def test_a_new_list_or_a_shorter_one_builds_the_set_again():
    a, b = _node(), _node()
    graph = gs.Graph(nodes=[a, b])
    assert all_in_graph(graph, [a, b])
    graph.nodes = [b]  # a sort's or a cleanup's new list
    assert not all_in_graph(graph, [a])
    graph.nodes.clear()
    graph.nodes.append(a)
    assert all_in_graph(graph, [a]) and not all_in_graph(graph, [b])


def test_an_edit_of_the_same_length():
    a, b, c, d = _node(), _node(), _node(), _node()
    graph = gs.Graph(nodes=[a, b, c])
    assert all_in_graph(graph, [a, b, c])
    del graph.nodes[1]  # b (list.remove would compare nodes with gs's __eq__)
    graph.nodes.append(d)  # the last node changed: read again
    assert all_in_graph(graph, [d]) and not all_in_graph(graph, [b])
    graph.nodes[1] = b  # unseen by the key: b is a "no", which sends readers_by_graph to its walk
    assert not all_in_graph(graph, [b])


def test_another_graph_does_not_read_the_set():
    a = _node()
    one, two = gs.Graph(nodes=[a]), gs.Graph(nodes=[_node()])
    assert all_in_graph(one, [a])
    assert not all_in_graph(two, [a])
    assert not all_in_graph(one.copy(), [a])  # a copy's nodes are other objects


def test_readers_by_graph_in_a_subgraph_after_the_outer_set_was_built():
    weight = gs.Constant("w", np.ones((4, 4), np.float32))
    x = gs.Variable("x", dtype=np.float32, shape=(4, 4))
    inner_out = gs.Variable("inner_out", dtype=np.float32, shape=(4, 4))
    inner = gs.Graph(nodes=[gs.Node("MatMul", inputs=[x, weight], outputs=[inner_out])], outputs=[inner_out])
    other = gs.Variable("other_out", dtype=np.float32, shape=(4, 4))
    else_graph = gs.Graph(nodes=[gs.Node("Identity", inputs=[x], outputs=[other])], outputs=[other])
    cond = gs.Variable("cond", dtype=np.bool_, shape=())
    y = gs.Variable("y", dtype=np.float32, shape=(4, 4))
    outer_mm = gs.Variable("mm", dtype=np.float32, shape=(4, 4))
    branch = gs.Node("If", inputs=[cond], outputs=[y], attrs={"then_branch": inner, "else_branch": else_graph})
    top = gs.Node("MatMul", inputs=[x, weight], outputs=[outer_mm])
    graph = gs.Graph(nodes=[top, branch], inputs=[x, cond], outputs=[y, outer_mm], opset=17)
    (site,) = [s for s in collect_constants(graph) if s.name == "w"]
    groups = readers_by_graph(site)
    assert sorted(len(found) for _, found in groups) == [1, 1]
    assert {id(g) for g, _ in groups} == {id(graph), id(inner)}
    top.inputs[1] = gs.Variable("elsewhere")  # only the subgraph's reader is left
    (g, found), = readers_by_graph(site)
    assert g is inner and found[0][0] is inner.nodes[0]
