"""Whether nodes are among one gs graph's own nodes, without a set of the graph's node ids built
at every question: `graph_utils.readers_by_graph` asks it for each weight, and on a 24-layer
decoder (1,370 nodes, 169 weights) the sets were 40-60 ms of `quant`'s main thread (2-4 ms now).

The set is kept on the graph with what it was built from: the `graph.nodes` list object (held,
and its id, so that neither a new list assigned by a sort or a cleanup nor a copied graph reads
an old set), that list's length then and its first and last nodes. The passes and lowerings
add nodes by appending to the list, so a longer list adds its tail to the set; a shorter one (or
another list) builds it anew.
The nodes themselves are held too, so an id in the set is never a freed node's id taken over by
a new object. They stay held until the set is built anew or the graph goes (Workspace.close):
nodes gs's cleanup removed meanwhile, disconnected by it, are kept that long with their attributes.

What the key does not see: an edit that keeps the list, its length and its first and last
nodes (a node in the middle assigned another; a node removed and another appended changes the
last). A node the set lacks is only a "no" here, which sends the caller to its exact walk of
every scope. A node removed from the graph stays a "yes" while the key holds; nothing here moves
a node from a graph into another's subgraph, and a removed node that still read a weight would
have no graph to be placed in anyway.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx_graphsurgeon as gs

# set straight into the graph's __dict__: gs.Graph.__getattr__ logs an error for a name it lacks
_KEY = "_onnxsurgery_node_members"


class _Members:
    __slots__ = ("nodes", "nodes_id", "count", "held", "ids")

    def __init__(self, nodes: list):
        self.nodes = nodes
        self.nodes_id = id(nodes)
        self.count = len(nodes)
        self.held = list(nodes)
        self.ids = {id(node) for node in self.held}

    def grow(self) -> None:
        tail = self.nodes[self.count:]
        self.held.extend(tail)
        self.ids.update(id(node) for node in tail)
        self.count = len(self.nodes)


def _ends_kept(members: _Members, current: list) -> bool:
    """The list's first and last counted nodes still the ones seen: a list emptied and filled
    again, or cut and grown back to its length, reads a new set."""
    count = members.count
    return count == 0 or (current[0] is members.held[0] and current[count - 1] is members.held[count - 1])


def all_in_graph(graph: gs.Graph, nodes: Iterable[gs.Node]) -> bool:
    """Whether every one of `nodes` is in `graph.nodes` (not in one of its subgraphs), as far as
    the module's key can tell (see above): a False may be wrong only towards the exact walk."""
    members = graph.__dict__.get(_KEY)
    current = graph.nodes
    if members is None or members.nodes_id != id(current) or members.nodes is not current \
            or len(current) < members.count or not _ends_kept(members, current):
        members = _Members(current)
        graph.__dict__[_KEY] = members
    elif len(current) > members.count:
        members.grow()
    ids = members.ids
    return all(id(node) in ids for node in nodes)
