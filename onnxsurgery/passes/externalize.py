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
sparse tensors stay. So do the scale and zero point of a QuantizeLinear/DequantizeLinear (a few
bytes; onnxruntime fuses such patterns only with constants), and a constant read by one inside
a subgraph (`_quantized_refusal` says why).
"""

from __future__ import annotations

import fnmatch

import onnx
import onnx_graphsurgeon as gs

from ..graph_names import overridable_initializers
from ..graph_utils import (
    ConstantSite,
    collect_constants,
    graph_outputs_holding,
    is_sparse,
    iter_scopes,
    read_values,
    replace_uses,
)
from ..report import PassReport


def _uses(site: ConstantSite) -> int:
    return sum(1 for node in site.value.outputs for t in node.inputs if t is site.value)


QUANT_OPS = ("QuantizeLinear", "DequantizeLinear")


def _quantized_refusal(site: ConstantSite) -> str | None:
    """Why a constant read by QuantizeLinear/DequantizeLinear stays in the graph, or None.

    onnxruntime fuses Q/DQ patterns (DequantizeLinear -> MatMul into MatMulNBits, QDQ groups
    into integer kernels) only where the scale and zero point, and for MatMulNBits the weight,
    are constants: fed as graph inputs they are data, the pattern runs unfused in float, and the
    outputs change (reported on an int8 QDQ classifier: a probability 0.077 -> 0.321). Scales and zero
    points are a few bytes: they stay. A quantized weight moves (`run`, `compare` and `embed`
    give it back as the initializer it was), except inside a subgraph: onnxruntime 1.32 then
    fails to load the fused MatMulNBits whose weight is an initializer of the main graph."""
    for node, index in ((n, i) for n in site.value.outputs for i, t in enumerate(n.inputs) if t is site.value):
        if node.op not in QUANT_OPS:
            continue
        if index > 0:
            return f"scale or zero point of a {node.op}: onnxruntime fuses the pattern only with constants"
        if site.scope.parent is not None:
            return (f"read by {node.op} inside {site.scope.label}: onnxruntime cannot load its fusion with a weight "
                    "from the main graph")
    return None


def select_constants(
    graph: gs.Graph,
    *,
    min_bytes: int | None = None,
    node_names: list[str] | tuple[str, ...] = (),
    op_types: list[str] | tuple[str, ...] = (),
    overridable: frozenset[str] | None = None,
    report: PassReport | None = None,
) -> list[ConstantSite]:
    overridable = overridable_initializers(graph) if overridable is None else overridable
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
        if site.name in overridable:
            reason = "overridable graph input"
        elif is_sparse(site.tensor) or site.onnx_dtype == onnx.TensorProto.STRING:
            reason = "sparse or string tensor"
        elif graph_outputs_holding(scopes, site.value):
            reason = "graph output"
        else:
            reason = _quantized_refusal(site)
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
                overridable: frozenset[str] | None = None) -> tuple[PassReport, dict]:
    """Select (`select_constants`) and move (`constants_to_inputs`) in one step: the report, and
    for each moved constant, by input name, a function that reads its array, for the caller to
    write out one at a time (a model's weights are never all in memory at once)."""
    report = PassReport("externalize")
    sites = select_constants(graph, min_bytes=min_bytes, node_names=node_names, op_types=op_types,
                             overridable=overridable,
                             report=report)
    moved = constants_to_inputs(graph, sites, report)
    return report, {name: MovedConstant(tensor) for name, tensor in moved}


class MovedConstant:
    """A moved constant's array, read when called (`npy.write_arrays`: one at a time); `tensor`
    is the gs Constant, whose bytes a writer may copy straight from the input's file."""

    def __init__(self, tensor: gs.Constant):
        self.tensor = tensor

    def __call__(self):
        return read_values(self.tensor)
