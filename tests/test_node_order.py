"""node_order.toposort: gs's own order (Graph.toposort), on graphs in any node order."""

import random

import numpy as np
import onnx_graphsurgeon as gs
import pytest

from onnxsurgery import node_order
from onnxsurgery.errors import InputError


def _graph(width: int = 6, depth: int = 5, seed: int = 0) -> gs.Graph:
    """A diamond-rich chain: each layer's nodes read one or two of the layer before, some a constant."""
    rng = random.Random(seed)
    x = gs.Variable("x", np.float32, [4])
    w = gs.Constant("w", np.ones(4, np.float32))
    nodes, layer = [], [x]
    for d in range(depth):
        made = []
        for k in range(width):
            a, b = rng.choice(layer), rng.choice([*layer, w])
            out = gs.Variable(f"t{d}_{k}", np.float32, [4])
            nodes.append(gs.Node("Add", f"n{d}_{k}", inputs=[a, b], outputs=[out]))
            made.append(out)
        layer = made
    return gs.Graph(nodes=nodes, inputs=[x], outputs=layer[:2], opset=17)


@pytest.mark.parametrize("seed", range(8))
def test_same_order_as_gs(seed):
    graph = _graph(seed=seed)
    random.Random(seed).shuffle(graph.nodes)
    before = list(graph.nodes)
    theirs = graph.copy()
    theirs.toposort()
    node_order.toposort(graph)
    assert [n.name for n in graph.nodes] == [n.name for n in theirs.nodes]
    assert sorted(map(id, before)) == sorted(map(id, graph.nodes))


def test_cycle_is_an_input_error():
    a, b = gs.Variable("a", np.float32, [1]), gs.Variable("b", np.float32, [1])
    nodes = [gs.Node("Relu", "p", inputs=[b], outputs=[a]), gs.Node("Relu", "q", inputs=[a], outputs=[b])]
    graph = gs.Graph(nodes=nodes, outputs=[b], opset=17)
    assert node_order._levels(graph, []) is None
    with pytest.raises(InputError, match="the graph has a cycle"):  # gs's own error, as one line
        node_order.toposort(graph)


def test_subgraph_reads_count():
    """An If whose branch reads an outer value comes after that value's producer, as in gs."""
    graph = _graph(seed=5)
    cond = gs.Variable("c", np.bool_, [])
    graph.inputs.append(cond)
    y = gs.Variable("y", np.float32, [4])
    branch = gs.Graph(nodes=[gs.Node("Identity", "inner", inputs=[graph.outputs[0]], outputs=[y])], outputs=[y])
    graph.nodes.insert(0, gs.Node("If", "if", attrs={"then_branch": branch, "else_branch": branch}, inputs=[cond],
                                  outputs=[gs.Variable("z", np.float32, [4])]))
    theirs = graph.copy()
    theirs.toposort()
    node_order.toposort(graph)
    assert [n.name for n in graph.nodes] == [n.name for n in theirs.nodes]
    assert graph.nodes[-1].name == "if"


def test_all_used_only_where_gs_removes_nothing():
    from onnxsurgery.live_nodes import all_used

    graph = _graph(seed=3)
    assert all_used(graph) == (len(graph.copy().cleanup().nodes) == len(graph.nodes))
    graph.nodes.append(gs.Node("Relu", "dead", inputs=[graph.outputs[0]], outputs=[gs.Variable("d", np.float32, [4])]))
    assert not all_used(graph)
    graph.cleanup()
    assert all_used(graph)
