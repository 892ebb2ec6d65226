"""Turn constants into graph inputs, so that their values can travel as separate files.

Before: constants (initializers or `Constant` nodes, in any scope) feed some nodes.
After: each selected constant is a graph input of the main graph with the constant's name,
dtype and shape; every node that read the constant reads the input. A subgraph cannot have
inputs of its own, so for a subgraph constant the input sits in the main graph and the
subgraph reads it by name from the outer scope.

Selection (`select_constants`): by default the constants read more than once (after merging,
that is what scs4onnx's npy mode moves out); `min_bytes`, `node_names` (globs over consumer
node names and constant names) and `op_types` select instead, their union.

Limits: a constant that is a graph output stays (its name is the output's name); string and
sparse tensors stay.
"""

from __future__ import annotations

import fnmatch

import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import (
    ConstantSite,
    collect_constants,
    graph_outputs_holding,
    is_sparse,
    iter_scopes,
    overridable_initializers,
    read_values,
    replace_uses,
)
from ..report import PassReport


def _uses(site: ConstantSite) -> int:
    return sum(1 for node in site.value.outputs for t in node.inputs if t is site.value)


def select_constants(
    graph: gs.Graph,
    *,
    min_bytes: int | None = None,
    node_names: list[str] | tuple[str, ...] = (),
    op_types: list[str] | tuple[str, ...] = (),
    keep: frozenset[str] | None = None,
    report: PassReport | None = None,
) -> list[ConstantSite]:
    keep = overridable_initializers(graph) if keep is None else keep
    scopes = list(iter_scopes(graph))
    chosen = []
    by_default = min_bytes is None and not node_names and not op_types
    for site in collect_constants(graph, scopes):
        consumers = list(site.value.outputs)
        if by_default:
            wanted = _uses(site) > 1
        else:
            wanted = (
                (min_bytes is not None and site.nbytes >= min_bytes)
                or any(fnmatch.fnmatchcase(site.name, g) for g in node_names)
                or any(fnmatch.fnmatchcase(n.name or "", g) for n in consumers for g in node_names)
                or any(n.op in op_types for n in consumers)
            )
        if not wanted:
            continue
        reason = None
        if site.name in keep:
            reason = "overridable graph input"
        elif is_sparse(site.tensor) or site.onnx_dtype == onnx.TensorProto.STRING:
            reason = "sparse or string tensor"
        elif graph_outputs_holding(scopes, site.value):
            reason = "graph output"
        if reason:
            if report is not None:
                report.skip(site.name, reason)
            continue
        chosen.append(site)
    return chosen


def constants_to_inputs(
    graph: gs.Graph, sites: list[ConstantSite], report: PassReport
) -> list[tuple[str, gs.Constant]]:
    """Replace each site by a main-graph input; returns (input name, constant) pairs."""
    moved = []
    for site in sites:
        value = site.value
        var = gs.Variable(site.name, dtype=site.tensor.dtype, shape=list(site.shape))
        if site.node is None:
            site.tensor.name = f"{site.name}__moved"  # frees the name; the constant leaves the graph
        else:
            value.name = f"{site.name}__moved"
        replace_uses(value, var)
        graph.inputs.append(var)
        moved.append((var.name, site.tensor))
        report.changed += 1
        report.bytes_saved += site.nbytes
    return moved


def externalize(graph: gs.Graph, *, min_bytes: int | None = None, node_names=(), op_types=(),
                keep: frozenset[str] | None = None) -> tuple[PassReport, dict]:
    """Select (`select_constants`) and move (`constants_to_inputs`) in one step: the report, and
    the moved arrays by input name, for the caller to write out."""
    report = PassReport("externalize")
    sites = select_constants(graph, min_bytes=min_bytes, node_names=node_names, op_types=op_types, keep=keep,
                             report=report)
    arrays = {site.name: read_values(site.tensor) for site in sites}
    moved = constants_to_inputs(graph, sites, report)
    return report, {name: arrays[name] for name, _ in moved}
