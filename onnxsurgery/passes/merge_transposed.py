"""Merge a 2-D constant that equals another one's transpose (opt-in: `--transposed`).

Before: A (m x n) and B (n x m) with B == A.T, typically a tied embedding (read by Gather) and
an LM head (read by MatMul) where the exporter folded the transpose into a second copy.
After: A alone, and B's consumers read `Transpose(A, perm=[1, 0])`.

Cost: one Transpose node per merge. onnxruntime folds it when the session starts, so
inference speed is unchanged, but session start does the transpose once and the runtime holds
both layouts in memory; only the file shrinks.

Limits: only 2-D tensors; B must not be a graph output; A must be visible from B's scope.
Run after `merge_duplicates`, so that each distinct tensor is considered once.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from ..graph_utils import (
    ConstantSite,
    NameAllocator,
    graph_outputs_holding,
    iter_scopes,
    read_values,
    replace_uses,
    stored_bytes,
)
from ..defaults import MERGE_MIN_ELEMENTS
from ..report import PassReport
from .base import Estimate, PassBase
from .merge_constants import candidate_sites


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True)
class MergeTransposed(PassBase):
    """Merge 2-D constants equal to another's transpose, in place (a Transpose node reads the survivor)."""

    min_elements: int = MERGE_MIN_ELEMENTS
    name = "merge_transposed"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """Exact: the pairs the pass would merge (reads the 2-D candidates' bytes)."""
        pairs, _ = _transposed_pairs(graph, min_elements=self.min_elements, overridable=overridable, removed=removed)
        return Estimate(self.name, sum(target.nbytes for _, target in pairs),
                        removes=frozenset(id(target.tensor) for _, target in pairs))

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        pairs, refused = _transposed_pairs(graph, min_elements=self.min_elements, overridable=overridable)
        for name, reason in refused:
            report.skip(name, reason)
        names = NameAllocator(graph)
        merged: list[dict] = []
        for source, target in pairs:
            _replace_with_transpose(source, target, names)
            merged.append({"name": target.name, "transpose_of": source.name, "bytes_saved": target.nbytes})
            report.bytes_saved += target.nbytes
        report.changed = len(merged)
        report.details = {
            "merged": merged,
            "cost": f"{len(merged)} Transpose node(s); onnxruntime folds them at session start, "
            "so the runtime holds both layouts in memory",
        }
        return report


def _transposed_pairs(graph: gs.Graph, *, min_elements: int, overridable: frozenset[str],
                      removed: frozenset[int] = frozenset()):
    """(source, target) pairs where target == source.T and target may read Transpose(source),
    each target and each source in one pair at most; and (name, reason) for pairs refused."""
    scopes = list(iter_scopes(graph))
    sites = [
        s for s in candidate_sites(graph, scopes, min_elements=min_elements, overridable=overridable)
        if len(s.shape) == 2 and id(s.tensor) not in removed
    ]
    by_layout: dict[tuple, list[ConstantSite]] = defaultdict(list)
    for s in sites:
        by_layout[(s.onnx_dtype, s.shape)].append(s)

    pairs: list[tuple[ConstantSite, ConstantSite]] = []
    refused: list[tuple[str, str]] = []
    merged_away: set[int] = set()
    in_use_as_source: set[int] = set()
    for (dtype, (m, n)), sources in by_layout.items():
        targets = by_layout.get((dtype, (n, m)), [])
        if not targets or (m, n) > (n, m):
            continue  # each pair of layouts once; square matrices pair within one bucket
        source_by_digest: dict[bytes, list[ConstantSite]] = defaultdict(list)
        for s in sources:
            source_by_digest[_digest(stored_bytes(s.tensor))].append(s)
        for target in targets:
            if id(target) in merged_away or id(target) in in_use_as_source:
                continue
            values = read_values(target.tensor)
            transposed = np.ascontiguousarray(values.T).tobytes()
            for source in source_by_digest.get(_digest(transposed), []):
                if source is target or id(source) in merged_away:
                    continue
                if stored_bytes(source.tensor) != transposed:
                    continue
                reason = _refusal(source, target, scopes)
                if reason:
                    refused.append((target.name, reason))
                    break
                pairs.append((source, target))
                merged_away.add(id(target))
                in_use_as_source.add(id(source))
                break
    return pairs, refused


def _refusal(source: ConstantSite, target: ConstantSite, scopes) -> str | None:
    if graph_outputs_holding(scopes, target.value):
        return "graph output"
    if source.node is not None and not source.scope.is_ancestor_of(target.scope):
        return f"transpose source {source.name} is not visible from {target.scope.label}"
    return None


def _replace_with_transpose(source: ConstantSite, target: ConstantSite, names: NameAllocator) -> None:
    out = gs.Variable(names.new(f"{target.name}__from_transpose"), dtype=target.value.dtype,
                      shape=list(target.shape))
    replace_uses(target.value, out)
    node = gs.Node("Transpose", name=names.new(f"{target.name}__transpose"),
                   attrs={"perm": [1, 0]}, inputs=[source.value], outputs=[out])
    target.scope.graph.nodes.append(node)
