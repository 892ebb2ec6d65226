"""Narrow int64 constants to int32 and float64 constants to float32, where that is safe.

Before: an int64 (float64) constant feeds some consumers.
After: the same constant stored as int32 (float32), for the consumers that accept it.

A constant is narrowed only when all of these hold:
- every value survives the round trip exactly (narrow, then widen back, gives equal bits);
- it is not a graph output, nor an overridable input (its type is part of the interface);
- for every consumer, the operator schema at the model's opset accepts the narrower type at
  that input, through a type variable that ties it to no other input or output (narrowing one
  side of an `Add` would break the other), and the consumer is one whose onnxruntime kernel is
  known to take the narrower type there (`NARROWABLE_INPUTS`).

So shape inputs (Reshape, Expand, Tile, ConstantOfShape: declared `tensor(int64)`) and Slice
indices (one type variable for starts/ends/axes/steps) are never narrowed. The tool people use
today narrows blindly, and onnxruntime then refuses the models it writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import (
    collect_constants,
    graph_outputs_holding,
    is_sparse,
    iter_scopes,
    read_values,
    set_values,
)
from ..report import PassReport
from .base import Estimate, PassBase

_NARROWER = {
    onnx.TensorProto.INT64: (np.int32, "tensor(int32)"),
    onnx.TensorProto.DOUBLE: (np.float32, "tensor(float)"),
}

# (op_type, input index) whose onnxruntime CPU kernels take int32 / float32 there as well as the
# wide type, with nothing else in the node forced to change.
NARROWABLE_INPUTS = {
    ("Gather", 1),
    ("GatherElements", 1),
    ("ScatterElements", 1),
    ("Cast", 0),
    ("CumSum", 1),
}


@dataclass(frozen=True)
class Narrow(PassBase):
    """Narrow int64/float64 constants in place where every consumer accepts the narrow type.
    `opsets` None: the graph's."""

    opsets: tuple[tuple[str, int], ...] | None = None  # a dict's items (a dict is taken too): hashable
    name = "narrow"

    def __post_init__(self):
        if isinstance(self.opsets, dict):
            object.__setattr__(self, "opsets", tuple(sorted(self.opsets.items())))

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """Exact: reads the int64/float64 constants to check that their values survive."""
        saved = sum(site.nbytes - narrow.nbytes
                    for site, narrow, _ in _narrowings(graph, overridable, self.opsets_of(graph))
                    if narrow is not None and id(site.tensor) not in removed)
        return Estimate(self.name, saved)

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        narrowed: list[dict] = []
        for site, narrow, reason in _narrowings(graph, overridable, self.opsets_of(graph)):
            if reason is not None:
                report.skip(site.name, reason)
                continue
            before = site.nbytes
            if site.node is None:
                set_values(site.tensor, narrow)
            else:
                site.node.attrs["value"] = gs.Constant(site.tensor.name, narrow)
                if site.value.dtype is not None:  # only where the type was declared already
                    site.value.dtype = narrow.dtype
            report.bytes_saved += before - narrow.nbytes
            narrowed.append({"name": site.name, "to": str(narrow.dtype), "bytes_saved": before - narrow.nbytes})
        report.changed = len(narrowed)
        report.details = {"narrowed": narrowed}
        return report

    def opsets_of(self, graph: gs.Graph) -> dict[str, int]:
        return dict(self.opsets) if self.opsets is not None else {"": graph.opset}


def _narrowings(graph: gs.Graph, overridable: frozenset[str], opsets: dict[str, int]):
    """(site, narrowed values, None) for each int64/float64 constant that may be narrowed, and
    (site, None, reason) for each that may not."""
    scopes = list(iter_scopes(graph))
    for site in collect_constants(graph, scopes):
        if site.onnx_dtype not in _NARROWER:
            continue
        np_type, type_str = _NARROWER[site.onnx_dtype]
        reason = _refusal(site, scopes, type_str, overridable, opsets)
        if reason is not None:
            yield site, None, reason
            continue
        wide = read_values(site.tensor)
        narrow = wide.astype(np_type)
        if not np.array_equal(narrow.astype(wide.dtype), wide, equal_nan=wide.dtype.kind == "f"):
            yield site, None, "values do not survive the round trip"
        else:
            yield site, narrow, None


def _refusal(site, scopes, type_str: str, overridable: frozenset[str], opsets: dict[str, int]) -> str | None:
    if site.name in overridable:
        return "overridable graph input"
    if is_sparse(site.tensor):  # written back dense: more bytes than its values and indices
        return "sparse tensor"
    if graph_outputs_holding(scopes, site.value):
        return "graph output: its type is part of the interface"
    consumers = list(site.value.outputs)
    if not consumers:
        return "no consumer"
    for node in consumers:
        for index, t in enumerate(node.inputs):
            if t is site.value:
                reason = _consumer_refusal(node, index, type_str, opsets)
                if reason is not None:
                    return reason
    return None


def _consumer_refusal(node: gs.Node, index: int, type_str: str, opsets: dict[str, int]) -> str | None:
    where = f"{node.op} input {index}"
    if (node.domain or "") not in ("", "ai.onnx"):
        return f"{where}: custom domain {node.domain}"
    try:
        schema = onnx.defs.get_schema(node.op, opsets.get("", 1), "")
    except onnx.defs.SchemaError:
        return f"no schema for {node.op} at opset {opsets.get('', 1)}"
    if index >= len(schema.inputs):
        return f"{where} is beyond the schema"
    formal = schema.inputs[index]
    if formal.type_str.startswith("tensor("):
        return None if formal.type_str == type_str else f"{where} must be {formal.type_str}"
    allowed = next(
        (c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == formal.type_str),
        [],
    )
    if type_str not in allowed:
        return f"{where} does not accept {type_str}"
    tied = [p for i, p in enumerate(schema.inputs) if i != index and p.type_str == formal.type_str]
    tied += [p for p in schema.outputs if p.type_str == formal.type_str]
    if tied:
        return f"{where} shares its type with '{tied[0].name}'"
    if (node.op, index) not in NARROWABLE_INPUTS:
        return f"{where} is not known to accept {type_str} in onnxruntime"
    return None
