"""gs's cleanup skipped where it would remove nothing, for a graph without local functions: the
pipeline cleans up before the quantizer and again before the export, and gs's walk
(Graph.cleanup: every tensor listed by name, a filter object per tensor, each node asked for
subgraphs) is 10-15 ms on a graph of 1,500 nodes each time, on graphs where nothing is dead.
The same walk here (gs's `_get_used_node_ids`: back from the outputs, through the local tensors
by name, each name once, a node's subgraphs' outer values included; every subgraph alike) says
whether every node is used; where one is not, or a graph input has a producer (which gs detaches
first), gs's cleanup runs as before."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from .node_order import NotPlain, local_names, read_tensors, with_subgraphs


def all_used(graph: gs.Graph) -> bool:
    """Whether gs's cleanup (graph inputs kept) would leave `graph` and its subgraphs as they are:
    no node to remove, no graph input to detach. False wherever gs should look itself."""
    if graph.functions or any(t.inputs for t in graph.inputs):
        return False
    try:
        holders = with_subgraphs(graph)
    except NotPlain:
        return False
    if not all(all_used(s) for n in holders for s in n.subgraphs()):
        return False
    holding = {id(n) for n in holders}
    local = local_names(graph)
    seen: set[str] = set()

    def wanted(t: gs.Tensor) -> bool:  # gs's IgnoreDupAndForeign
        if t.is_empty():
            return True
        if t.name not in local or t.name in seen:
            return False
        seen.add(t.name)
        return True

    nodes = {id(n) for n in graph.nodes}
    used: set[int] = set()
    queue = [t for t in graph.outputs if wanted(t)]
    for t in queue:  # grows as it goes
        for node in t.inputs:
            if id(node) not in nodes:
                return False  # gs's error, or its own answer
            used.add(id(node))
            queue.extend(x for x in read_tensors(node, holding) if wanted(x))
    return len(used) == len(nodes) == len(graph.nodes)
