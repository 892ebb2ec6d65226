"""What every pass offers a pipeline: estimate what it would do, or do it.

Each pass module keeps its public function (`merge_duplicate_constants(graph, ...) ->
PassReport`, for scripts; the quantizer's is graph_api.quantize_weights) and adds a small class
holding the pass's options, with two methods:

- `estimate(graph, overridable=..., removed=...)`: the bytes the pass would save, without changing
  the graph, and the constants it would remove, so that the next pass's estimate leaves them
  out (quant's estimate does not count a weight that the merge before it removes).
- `apply(graph, overridable=...)`: do it, in place, and say what was done (PassReport).

A pipeline is a list of these (pipeline.py: shrink_pipeline, quant_pipeline): `quant`, `shrink`
and `info` run or estimate the same lists, so `info` asks the passes instead of reaching into
their internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import onnx_graphsurgeon as gs

from ..report import PassReport


@dataclass
class Estimate:
    """What a pass would do to a graph. `removes` holds `id()`s of the gs.Constant objects
    it would merge away; `details` pass-specific figures (e.g. the duplicate groups)."""

    name: str
    bytes_saved: int = 0
    removes: frozenset[int] = frozenset()
    details: dict[str, Any] = field(default_factory=dict)


class Pass(Protocol):
    name: str
    # True for a pass that must not see what earlier passes left dead (a constant merged away
    # still looks like a weight with no reader): the runner cleans up the graph before it.
    needs_cleanup: bool

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        ...

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        ...
