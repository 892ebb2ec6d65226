"""Names across a model's scopes on import: the initializers a caller may override, and tensor
names made unique where a subgraph shadows an outer one (NameAllocator hands out new ones)."""

from __future__ import annotations

import itertools

import onnx_graphsurgeon as gs

from .graph_utils import NameAllocator, iter_scopes


def overridable_initializers(graph: gs.Graph) -> frozenset[str]:
    """Names of the constants listed among the main graph's inputs: defaults a caller may
    override (gs's import drops them from `graph.inputs`; `onnxsurgery.import_graph` keeps
    them there). Passes leave them alone."""
    return frozenset(t.name for t in graph.inputs if isinstance(t, gs.Constant))


def make_names_unique(graph: gs.Graph) -> int:
    """Rename tensors so that no two distinct tensor objects share a name in any scope.

    ONNX lets a subgraph shadow an outer name; once passes rewire uses across scopes, a
    shadowed name could end up meaning two tensors in one scope. The main graph's inputs and
    outputs keep their names: they are the model's interface.
    """
    scopes = list(iter_scopes(graph))
    seen: dict[str, int] = {}
    to_rename: list[gs.Tensor] = []
    protected = {id(t) for t in graph.inputs} | {id(t) for t in graph.outputs}

    def visit(t: gs.Tensor) -> None:
        if not t.name:
            return
        owner = seen.setdefault(t.name, id(t))
        if owner != id(t) and id(t) not in protected:
            to_rename.append(t)

    for scope in scopes:
        for t in itertools.chain(scope.graph.inputs, scope.graph.outputs):
            visit(t)
        for node in scope.graph.nodes:
            for t in itertools.chain(node.inputs, node.outputs):
                visit(t)
    if not to_rename:
        return 0
    names = NameAllocator(graph)
    renamed: set[int] = set()
    for t in to_rename:
        if id(t) not in renamed:
            renamed.add(id(t))
            t.name = names.new(t.name)
    return len(renamed)
