"""Turn `Constant` nodes holding a tensor into initializers of the same name.

Before: Constant(value=T) -> out -> consumers, in any scope.
After: an initializer `out` with T's values, owned by the innermost graph enclosing its uses.

Tools that only look at initializers (onnxruntime's quantize_dynamic, for one, which stops
with "Expected ... to be an initializer" on PP-OCR models) then see every weight. A Constant
node whose output is a graph output stays: an initializer cannot be an output of a subgraph
in every runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_graphsurgeon as gs

from ..graph_utils import collect_constants, graph_outputs_holding, held_values, iter_scopes, replace_uses
from ..report import PassReport
from .base import Estimate, PassBase


@dataclass(frozen=True)
class ConstantsToInitializers(PassBase):
    """Constant nodes of at least `min_elements` elements made initializers (module doc)."""

    min_elements: int = 1
    name = "constants_to_initializers"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        return Estimate(self.name)  # a Constant node's tensor and an initializer weigh alike

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        scopes = list(iter_scopes(graph))
        for site in collect_constants(graph, scopes):
            if site.node is None or site.num_elements < self.min_elements:
                continue
            if graph_outputs_holding(scopes, site.value):
                report.skip(site.name, "graph output")
                continue
            out = site.value
            name = out.name
            out.name = f"{name}__node"
            replace_uses(out, gs.Constant(name, held_values(site.tensor)))
            report.changed += 1
        return report
