"""Run passes over a model: import once, rewrite, clean up and sort once, export once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import onnx
import onnx_graphsurgeon as gs

from .graph_utils import make_names_unique
from .io import export_model, import_graph, inputs_with_defaults, load_model_with_size
from .report import PassReport

ModelSource = "str | os.PathLike | onnx.ModelProto | gs.Graph"


@dataclass
class Workspace:
    """A model opened for rewriting.

    `template` is the ModelProto the graph came from (None for a gs.Graph given directly); it
    must outlive the graph, whose constants read their bytes from it lazily.
    """

    graph: gs.Graph
    template: onnx.ModelProto | None
    keep: frozenset[str] = frozenset()
    input_bytes: int = 0
    min_opset: int | None = None
    reports: list[PassReport] = field(default_factory=list)

    @property
    def opsets(self) -> dict[str, int]:
        if self.template is None:
            return {"": self.graph.opset}
        return {o.domain if o.domain != "ai.onnx" else "": o.version for o in self.template.opset_import}


    def run(self, pass_fn: Callable[..., PassReport], **options) -> PassReport:
        report = pass_fn(self.graph, **options)
        self.reports.append(report)
        return report

    def finish(self) -> onnx.ModelProto:
        """Remove what the passes left dead, sort, and export."""
        self.graph.cleanup(remove_unused_graph_inputs=False, recurse_subgraphs=True)
        self.graph.toposort(recurse_subgraphs=True)
        return export_model(self.graph, self.template, keep_as_inputs=self.keep,
                            min_opset=self.min_opset)


def open_workspace(source) -> Workspace:
    if isinstance(source, gs.Graph):
        return Workspace(source, None)
    if isinstance(source, onnx.ModelProto):
        model, size = source, source.ByteSize()
    else:
        model, size = load_model_with_size(source)
    graph = import_graph(model)
    make_names_unique(graph)
    return Workspace(graph, model, keep=inputs_with_defaults(model), input_bytes=size)
