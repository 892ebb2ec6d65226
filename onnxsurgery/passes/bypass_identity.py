"""Read constants directly instead of through Identity nodes. Lossless.

Before: W (constant) -> Identity -> consumers        After: W -> consumers

Why: exporters of models that share weights across layers (ALBERT) write one Identity per
layer in front of each shared weight. The quantize pass chooses a lowering by who reads a
weight (MatMul, Gemm, Conv, Gather); through an Identity it sees only "Identity" and falls back
to its generic chain. Limits: an Identity whose output is a graph output is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_graphsurgeon as gs

from ..graph_utils import iter_scopes
from ..report import PassReport
from .base import Estimate, PassBase


@dataclass(frozen=True)
class BypassIdentities(PassBase):
    """Constants read directly instead of through Identity nodes (module doc). Saves no bytes
    itself; it lets the quantize pass after it see who reads each weight."""

    name = "bypass_identity"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        return Estimate(self.name)

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        scopes = list(iter_scopes(graph))
        outputs = {id(t) for s in scopes for t in s.graph.outputs}
        for scope in scopes:
            for node in scope.graph.nodes:
                if node.op != "Identity" or not node.inputs or not isinstance(node.inputs[0], gs.Constant):
                    continue
                (output,) = node.outputs
                if id(output) in outputs:
                    continue
                for reader in list(output.outputs):
                    for i, t in enumerate(reader.inputs):
                        if t is output:
                            reader.inputs[i] = node.inputs[0]
                node.outputs.clear()
                report.changed += 1
        return report
