"""A constant read only by `Shape` nodes becomes its shape.

Before: a constant (initializer or `Constant` node, any scope) whose every reader is a `Shape`
node, e.g. the float [1,1,8,16,128] tensors tf2onnx writes beside a BERT's [128,128] weights
only so that a `Shape` can read their dimensions (30% of such a file).
After: each of those `Shape` nodes is a `Constant` node holding, as int64, the dimensions it
returned (its `start`/`end` attributes, opset 15+, applied as the spec says: negative counts
from the back, clamped to the rank), under the same output name; the constant, now unread, is
removed. Exact: `Shape` reads only the (static) dimensions of a constant, never its values, so
no value is read from the file either.

The rewrite is made only where it makes the file smaller: the constant's payload must outweigh
the int64 dimensions written in its place (8 bytes each, plus a few bytes per tensor), which
rules out tiny constants.

Limits: a constant that is a graph output or an overridable graph input (its shape may change
when a caller feeds another) is left alone, as is one read by anything besides `Shape`
(`Shape` of it is folded by onnxruntime anyway, and the constant stays). Sparse and string
constants are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import (
    ConstantSite,
    NameAllocator,
    collect_constants,
    consumers,
    graph_outputs_holding,
    is_sparse,
    iter_scopes,
)
from ..report import PassReport
from .base import Estimate, PassBase

# A TensorProto's fields besides its payload (data_type, dims, the raw_data tag), about.
TENSOR_OVERHEAD = 16


def shape_slice(dims: tuple[int, ...], start: int | None, end: int | None) -> list[int]:
    """dims[start:end] as ONNX `Shape` (opset 15) reads its attributes: negative values count
    from the back, both are clamped to [0, rank], an empty result where start >= end."""
    rank = len(dims)

    def clamp(i: int | None, default: int) -> int:
        if i is None:
            return default
        i = int(i)
        if i < 0:
            i += rank
        return min(max(i, 0), rank)

    return list(dims[clamp(start, 0):clamp(end, rank)])


@dataclass
class ShapeOnly:
    """One constant read only by Shape: its readers and what each returns."""

    site: ConstantSite
    readers: list[tuple[gs.Node, list[int]]]

    @property
    def bytes_saved(self) -> int:
        """The payload removed, less the int64 dimensions written in its place."""
        return self.site.nbytes - sum(8 * len(dims) + TENSOR_OVERHEAD for _, dims in self.readers)

    def to_dict(self) -> dict:
        return {"name": self.site.name, "dtype": onnx.TensorProto.DataType.Name(self.site.onnx_dtype).lower(),
                "shape": list(self.site.shape), "shape_nodes": len(self.readers), "bytes_saved": self.bytes_saved}


def find_shape_only(graph: gs.Graph, *, overridable: frozenset[str],
                    removed: frozenset[int] = frozenset()) -> list[ShapeOnly]:
    """The constants of `graph` (all scopes) read only by Shape nodes whose replacement by their
    shape saves bytes. Decided on dtype, shape and readers alone: no value is read."""
    scopes = list(iter_scopes(graph))
    found = []
    for site in collect_constants(graph, scopes):
        if id(site.tensor) in removed or site.name in overridable or is_sparse(site.tensor):
            continue
        if site.onnx_dtype == onnx.TensorProto.STRING:
            continue
        readers = consumers(site)
        if not readers or any(node.op != "Shape" or (node.domain or "") not in ("", "ai.onnx")
                              for node, _ in readers):
            continue
        if graph_outputs_holding(scopes, site.value):
            continue
        nodes = list({id(node): node for node, _ in readers}.values())
        item = ShapeOnly(site, [(node, shape_slice(site.shape, node.attrs.get("start"), node.attrs.get("end")))
                                for node in nodes])
        if item.bytes_saved > 0:
            found.append(item)
    return found


@dataclass(frozen=True)
class FoldShapeOnly(PassBase):
    """Replace every Shape node that reads a constant read only by Shape nodes with a Constant
    node holding the shape it returns, in place; the constants are then unread."""

    name = "shape_only"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """Exact: the constants the pass removes (no value is read)."""
        found = find_shape_only(graph, overridable=overridable, removed=removed)
        return Estimate(self.name, sum(item.bytes_saved for item in found),
                        removes=frozenset(id(item.site.tensor) for item in found),
                        details={"constants": found})

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        found = find_shape_only(graph, overridable=overridable)
        report.details = {"constants": [item.to_dict() for item in found]}
        names = NameAllocator(graph)
        for item in found:
            for node, dims in item.readers:
                node.op = "Constant"
                node.attrs.clear()
                node.attrs["value"] = gs.Constant(names.new(f"{node.outputs[0].name}__value"), np.array(dims, np.int64))
                node.inputs.clear()
            if item.site.node is not None:  # the Constant node that held it is unread: gone now, not at cleanup
                item.site.node.outputs.clear()
                nodes = item.site.scope.graph.nodes
                nodes[:] = [n for n in nodes if n is not item.site.node]
            report.changed += 1
            report.bytes_saved += item.bytes_saved
        return report
