"""Merge constants that hold the same bytes under another shape, through a Reshape.

Before: constants (initializers or `Constant` nodes, any scope) of one dtype and element count
whose stored bytes are equal but whose shapes differ, e.g. tf2onnx writing a [128,128] weight
again as [1,1,8,16,128] for another reader.
After: one of them remains; each other one's readers read `Reshape(kept, shape)`, the shape an
int64 initializer, one Reshape in each graph (main or subgraph) holding readers. Exact: Reshape
keeps every byte in order, so the readers see the same values, bit for bit.

Cost: a Reshape node, its output's name and a shape of 8 bytes per dimension, per merge. A
merge is made only where the bytes removed outweigh those, so it never makes the file larger,
and tiny tensors are left alone. In memory it costs: onnxruntime (1.32) folds Reshape of an
initializer when the session starts and then holds one copy more than the original did (W
[1024, 1024] read by MatMul and the same bytes [1, 1024, 1024] read by Mul: 21.5 -> 25.5 MB of
growth over session creation; with ConstantFolding off 17.5 MB, the Reshape then a view at
run time). Hence opt-in (`shrink --reshaped`), as `--transposed` is.

How equal tensors are found: constants are bucketed by (dtype, element count), which costs
nothing; only buckets holding two shapes or more are fingerprinted (merge_constants's
`fingerprint`: a few samples of a large tensor, read one tensor at a time), and every merge is
confirmed byte for byte. Run after `merge_duplicates`, which merges copies of the same shape:
here each distinct tensor is then considered once (a same-shape copy met here is merged
without a Reshape).

Limits: the dtype must be one Reshape takes at any opset (not float8 or 4-bit). The kept
tensor is chosen as `merge_duplicates` chooses (outermost scope, initializers first). A
constant that is a graph output or an overridable input stays, and so does one read by a
Quantize/DequantizeLinear or an op outside the default domain (an already quantized model's
fusions want the constant itself, not a Reshape of it). Sparse and string tensors are left
alone. `quant` does not run this pass, and its quantizer does not see through a Reshape: a
weight merged here stays float when the result is quantized (quantize the original).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import (
    QUANT_READERS,
    ConstantSite,
    NameAllocator,
    Scope,
    consumers,
    graph_outputs_holding,
    iter_scopes,
    readers_by_graph,
    replace_uses,
)
from ..defaults import MERGE_MIN_ELEMENTS
from ..report import PassReport
from .base import Estimate, PassBase
from .merge_constants import (
    DuplicateGroup,
    confirm_equal,
    survivor_rank,
    survivor_value,
    candidate_sites,
    fingerprint,
)

# what Reshape takes at every opset a model with such tensors has (not float8, 4-bit, strings)
RESHAPED_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL})
MAX_MERGES_REPORTED = 10


def reshape_cost(site: ConstantSite) -> int:
    """Bytes a Reshape in front of `site`'s readers adds, about: per graph holding readers, a
    node (op type, two input names, output and node names) and its output's value info; once,
    the int64 shape (its name, 8 bytes a dimension)."""
    name = len(site.name.encode())
    per_graph = 5 * name + 96
    return per_graph * len(readers_by_graph(site)) + 8 * len(site.shape) + 2 * name + 32


@dataclass
class Merge:
    """`target`'s readers will read `source` under target's shape; `cost`: the bytes that adds
    (`reshape_cost`, none for the same shape)."""

    source: ConstantSite
    target: ConstantSite
    cost: int = 0

    @classmethod
    def of(cls, source: ConstantSite, target: ConstantSite) -> Merge:
        return cls(source, target, reshape_cost(target) if source.shape != target.shape else 0)

    @property
    def reshaped(self) -> bool:
        return self.source.shape != self.target.shape

    @property
    def bytes_saved(self) -> int:
        return self.target.nbytes - self.cost

    def to_dict(self) -> dict:
        return {"name": self.target.name, "shape": list(self.target.shape), "reshape_of": self.source.name,
                "source_shape": list(self.source.shape), "bytes_saved": self.bytes_saved}


def find_reshaped_merges(graph: gs.Graph, *, min_elements: int, overridable: frozenset[str],
                         removed: frozenset[int] = frozenset()) -> tuple[list[Merge], list[tuple[str, str]]]:
    """The merges worth making, and (name, reason) for each equal tensor left alone."""
    scopes = list(iter_scopes(graph))
    by_size: dict[tuple[int, int], list[ConstantSite]] = defaultdict(list)
    for site in candidate_sites(graph, scopes, min_elements=min_elements, overridable=overridable):
        if id(site.tensor) not in removed and site.onnx_dtype in RESHAPED_TYPES and consumers(site):
            by_size[(site.onnx_dtype, site.num_elements)].append(site)
    merges: list[Merge] = []
    refused: list[tuple[str, str]] = []
    for bucket in by_size.values():
        if len({s.shape for s in bucket}) < 2:
            continue  # one shape: merge_duplicates' work
        by_print: dict[bytes, list[ConstantSite]] = defaultdict(list)
        for site in bucket:  # one tensor read at a time (a few samples of a large one)
            by_print[fingerprint(site.tensor, site.nbytes)].append(site)
        for same_print in by_print.values():
            if len({s.shape for s in same_print}) < 2:
                continue
            for group in confirm_equal(same_print):
                _plan(group, scopes, merges, refused)
    merges.sort(key=lambda m: -m.bytes_saved)
    return merges, refused


def _plan(group: DuplicateGroup, scopes: list[Scope], merges: list[Merge], refused: list[tuple[str, str]]) -> None:
    members = sorted(group.members, key=survivor_rank)  # as merge_duplicates keeps one
    usable = []
    for site in members:
        reason = _refusal(site, scopes)
        if reason is None:
            usable.append(site)
        else:
            refused.append((site.name, reason))
    if len(usable) < 2:
        return
    source = usable[0]
    for target in usable[1:]:
        merge = Merge.of(source, target)
        if merge.bytes_saved > 0:
            merges.append(merge)
        elif merge.reshaped:
            refused.append((target.name, "a Reshape would cost more bytes than the merge saves"))


def _refusal(site: ConstantSite, scopes: list[Scope]) -> str | None:
    if graph_outputs_holding(scopes, site.value):
        return "graph output"
    for node, _ in consumers(site):
        if (node.domain or "") not in ("", "ai.onnx"):
            return f"read by {node.op} of domain {node.domain}"
        if node.op in QUANT_READERS:
            return f"read by {node.op} (a quantized model's fusions want the constant itself)"
    return None


@dataclass(frozen=True)
class MergeReshaped(PassBase):
    """Merge constants equal in bytes to another under another shape, in place (each one's
    readers read a Reshape of the kept one)."""

    min_elements: int = MERGE_MIN_ELEMENTS
    name = "merge_reshaped"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """The merges the pass would make (reads the candidates' bytes, one tensor at a time)."""
        merges, _ = find_reshaped_merges(graph, min_elements=self.min_elements, overridable=overridable,
                                         removed=removed)
        return Estimate(self.name, sum(m.bytes_saved for m in merges),
                        removes=frozenset(id(m.target.tensor) for m in merges), details={"merges": merges})

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        merges, refused = find_reshaped_merges(graph, min_elements=self.min_elements, overridable=overridable)
        for name, reason in refused:
            report.skip(name, reason)
        report.changed = len(merges)
        report.bytes_saved = sum(m.bytes_saved for m in merges)
        report.details = {"merged": [m.to_dict() for m in merges[:MAX_MERGES_REPORTED]],
                          "reshapes": sum(m.reshaped for m in merges)}
        names = NameAllocator(graph)
        by_source: dict[int, list[Merge]] = defaultdict(list)
        for merge in merges:
            by_source[id(merge.source)].append(merge)
        for group in by_source.values():
            # what every member can see: the source itself, or an initializer sharing its bytes
            source = group[0].source
            survivor = survivor_value(DuplicateGroup([source, *(m.target for m in group)]), names)
            if survivor is not source.value:  # a Constant node no other member sees: now an initializer
                _redirect(Merge(source, source), survivor, names)
            for merge in group:
                _redirect(merge, survivor, names)
        return report


def _redirect(merge: Merge, survivor: gs.Tensor, names: NameAllocator) -> None:
    target = merge.target
    if not merge.reshaped:
        replace_uses(target.value, survivor)
    else:
        shape = gs.Constant(names.new(f"{target.name}__shape"), np.array(target.shape, np.int64))
        for graph, readers in readers_by_graph(target):
            out = gs.Variable(names.new(f"{target.name}__reshaped"), dtype=target.tensor.dtype,
                              shape=list(target.shape))
            graph.nodes.append(gs.Node("Reshape", name=names.new(f"{target.name}__Reshape"),
                                       inputs=[survivor, shape], outputs=[out]))
            for node, index in readers:
                node.inputs[index] = out
    if target.node is not None:  # its Constant node is unread: gone now, not at cleanup
        target.node.outputs.clear()
        nodes = target.scope.graph.nodes
        nodes[:] = [n for n in nodes if n is not target.node]
