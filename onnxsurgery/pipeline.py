"""Run passes over a model: import once, rewrite, clean up and sort once, export once.

A pipeline is data: a list of passes (passes/base.py), built here once per command
(`shrink_pipeline`, `quant_pipeline`), run by one manager (passes.base.PassManager): whole
(`run_pipeline`, by the API, the CLI and scripts on gs graphs alike), estimated without changing
the graph (`estimate_pipeline`, by `info`), or up to the quantizer's plan (`dry_run_pipeline`,
by `quant --dry-run`). `finish` is the end of every pipeline: cleanup, sort, export, once.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from .defaults import MERGE_MIN_ELEMENTS
from .graph_names import make_names_unique, overridable_initializers
from .graph_utils import collect_constants, hold_values, held_values
from .node_order import toposort
from .export import export_model
from .storage.io import import_onnx, inputs_with_defaults, open_model
from .storage.file_backed import FileBackedValues
from .storage.lazy import ExternalFiles, materialize
from .passes.base import Estimate, PassBase, PassManager, remove_dead
from .passes.cast_weights import CastWeights
from .passes.half_width import HalfWidth
from .passes.merge_constants import MergeDuplicates
from .passes.shape_only import FoldShapeOnly
from .storage.protos import all_tensor_protos
from .report import PassReport, human_bytes

if TYPE_CHECKING:  # the quantizer's modules load with `quant`, not with every command
    from .quantization.calibration import Calibration
    from .quantization.options import QuantOptions
    from .quantization.plan import Plan

log = logging.getLogger("onnxsurgery")
MAX_NAMES_LOGGED = 20


@dataclass
class Workspace:
    """A model opened for rewriting.

    `template` is the ModelProto the graph came from (None for a gs.Graph given directly); it
    must outlive the graph, whose constants read their bytes from it lazily.
    """

    graph: gs.Graph
    template: onnx.ModelProto | None
    overridable: frozenset[str] = frozenset()  # initializers also listed as graph inputs: a caller may feed them
    input_bytes: int = 0
    files: ExternalFiles | None = None
    reports: list[PassReport] = field(default_factory=list)

    @property
    def opsets(self) -> dict[str, int]:
        if self.template is None:
            return {"": self.graph.opset}
        return {o.domain if o.domain != "ai.onnx" else "": o.version for o in self.template.opset_import}

    @property
    def has_external_data_files(self) -> bool:
        """True when the input keeps tensors in files other than the .onnx itself."""
        return self.files is not None and bool(self.files.data_files)

    def run_pipeline(self, passes: list[PassBase]) -> list[PassReport]:
        reports = PassManager(tuple(passes), self.overridable).run(self.graph)
        for report in reports:
            self.reports.append(report)
            _log_report(report)
        return reports

    def cleanup(self) -> None:
        remove_dead(self.graph)

    @property
    def store(self) -> ExternalFiles | None:
        """Where passes move the payloads they make (`ExternalFiles.offload`): the input's files
        once `spill_into` a folder, else None (everything stays in memory)."""
        return self.files if self.files is not None and self.files.spilling else None

    def finish(self) -> onnx.ModelProto:
        """The graph's `finish` (cleanup, sort, export once). Large payloads may still be
        references into the input's files, or to arrays the files hold (`ExternalFiles.hold`):
        write with `save_model(..., files=self.files)` before `close`, or read them in
        (`materialized`) for a self-contained ModelProto."""
        return finish(self.graph, self.template, overridable=self.overridable, store=self.files)

    def close(self, collect: bool = True) -> None:
        """Release the graph, the input's proto and its data files once the result is staged,
        before verification creates onnxruntime sessions. gs graphs hold reference cycles
        (nodes and tensors point at each other), hence the collection; `collect=False` where
        nothing runs next (the 1.21 GB decoder's --no-verify: 0.17 s of collecting)."""
        self.graph = None  # type: ignore[assignment]
        self.template = None
        if self.files is not None:
            self.files.close()
        if collect:
            gc.collect()

    def materialized(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """`model` (`finish`'s, or the input's template) with every payload still in the input's
        files read back in: a self-contained ModelProto."""
        if self.files is not None:
            materialize(model, self.files, all_tensor_protos(model.graph))
        return model


def shrink_pipeline(*, min_elements: int = MERGE_MIN_ELEMENTS, transposed: bool = False, narrow: bool = False,
                    half: bool = True, reshaped: bool = False, opsets: dict[str, int] | None = None,
                    store: ExternalFiles | None = None, casts: bool = True) -> list[PassBase]:
    """`shrink`: constants read only by Shape become their shape; identical constants merged;
    optionally (`reshaped`) those equal under another shape, through a Reshape; optionally
    transposed copies; optionally narrow; unless `casts` is False, float constants that every
    reader Casts to a narrower type stored as the Cast's result; then, unless `half` is False,
    float32 constants exact in 16 bits stored in 2 bytes (moved to `store` as they accumulate,
    `ExternalFiles.offload`)."""
    steps: list[PassBase] = [FoldShapeOnly(), MergeDuplicates(min_elements)]
    # the optional passes imported when asked for: their modules are 5 ms of a shrink's imports
    if reshaped:
        from .passes.merge_reshaped import MergeReshaped

        steps.append(MergeReshaped(min_elements))
    if transposed:
        from .passes.merge_transposed import MergeTransposed

        steps.append(MergeTransposed(min_elements))
    if narrow:
        from .passes.narrow_types import Narrow

        steps.append(Narrow(opsets))
    if casts:
        steps.append(CastWeights(min_elements, store))
    if half:
        steps.append(HalfWidth(min_elements, (opsets or {}).get(""), store))
    return steps


def quant_pipeline(options: QuantOptions, *, merge: bool = True, opsets: dict[str, int] | None = None,
                   calibration: Calibration | None = None, activations: Calibration | None = None,
                   records=None, store: ExternalFiles | None = None) -> list[PassBase]:
    """`quant`: Identity nodes in front of weights bypassed (so that the quantizer sees who
    reads each weight), constants read only by Shape replaced by their shape and identical
    constants merged (unless `merge` is False), weights quantized (as `records`, a plan
    read from a file or the budget's Plan, or as the options' plan); for TensorRT, which
    computes in int32, int64 constants narrowed where exact.
    `store`: where the quantizer moves its payloads as they accumulate (`ExternalFiles.offload`)."""
    from .passes.bypass_identity import BypassIdentities
    from .passes.narrow_types import Narrow
    from .passes.quantize_weights import QuantizeWeights
    from .quantization.plan import Plan

    steps: list[PassBase] = [BypassIdentities()]
    if merge:
        steps += [FoldShapeOnly(), MergeDuplicates()]
    steps.append(QuantizeWeights(options, (opsets or {}).get(""), calibration, activations,
                                 records if records is None or isinstance(records, Plan) else tuple(records),
                                 store=store))
    if options.target == "tensorrt":
        steps.append(Narrow(opsets))
    return steps


def run_pipeline(graph: gs.Graph, passes: list[PassBase], *,
                 overridable: frozenset[str] | None = None) -> list[PassReport]:
    """`passes` applied in order, in place (PassManager.run); `overridable` (default: the
    constants listed among the graph's inputs) is never touched."""
    return PassManager(tuple(passes), overridable).run(graph)


def dry_run_pipeline(graph: gs.Graph, passes: list[PassBase], *, overridable: frozenset[str] | None = None) -> Plan:
    """`quant --dry-run`: the passes before the quantizer applied (on a graph nobody writes), then
    the quantizer's plan (quantization.plan.Plan) returned, the graph otherwise unchanged (passes
    after it, such as TensorRT's narrowing, change no weight's plan)."""
    from .passes.quantize_weights import QuantizeWeights

    overridable = overridable_initializers(graph) if overridable is None else overridable
    quantize = PassManager(tuple(passes), overridable).run_until(graph, QuantizeWeights)
    return quantize.plan(graph, overridable=overridable)


def estimate_pipeline(graph: gs.Graph, passes: list[PassBase], *, overridable: frozenset[str] | None = None,
                      memo: dict | None = None) -> list[Estimate]:
    """What each pass would save, the graph unchanged (PassManager.estimate)."""
    return PassManager(tuple(passes), overridable).estimate(graph, memo)


def finish(graph: gs.Graph, template: onnx.ModelProto | None = None, *,
           overridable: frozenset[str] | None = None, store: ExternalFiles | None = None) -> onnx.ModelProto:
    """The end of every pipeline: remove what the passes left dead (in all scopes, keeping graph
    inputs), sort, and export with onnxsurgery's exporter, which writes each constant once in the
    innermost graph that reads it (gs.export_onnx writes an outer constant again into every
    subgraph reading it). IR version, opsets, metadata and functions come from `template` (the
    model the graph was imported from) when given. `overridable` (default: the constants listed among
    the graph's inputs) stay listed as inputs: overridable defaults. With `store`, large
    in-memory payloads are referred to where it holds them (`export.export_model`)."""
    remove_dead(graph)
    toposort(graph)  # gs's order, faster (node_order.py)
    overridable = overridable_initializers(graph) if overridable is None else overridable
    return export_model(graph, template, keep_as_inputs=overridable, store=store)


def _log_report(report: PassReport) -> None:
    """-v: what the pass changed, every skip with its reason, and the names it lists."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info("%s: %d changed, %s saved", report.name, report.changed, human_bytes(report.bytes_saved))
    for skipped in report.skipped:
        log.info("%s: skipped %s: %s", report.name, skipped.name, skipped.reason)
    for key, value in report.details.items():
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            more = f" (+{len(value) - MAX_NAMES_LOGGED} more)" if len(value) > MAX_NAMES_LOGGED else ""
            log.info("%s: %s: %s%s", report.name, key, ", ".join(value[:MAX_NAMES_LOGGED]), more)


def open_workspace(source, files: ExternalFiles | None = None, *, structure: bool = False) -> Workspace:
    """A workspace on a path, a ModelProto or a gs.Graph. `files`: where a ModelProto's external
    references point (a model read by open_model and rewritten, e.g. upgraded, payloads still
    in the input's files). `structure` (a path): its long list attributes left out
    (skim.read_structure), for a workspace that is never written (info)."""
    if isinstance(source, gs.Graph):
        return Workspace(source, None, overridable=overridable_initializers(source))
    if isinstance(source, onnx.ModelProto):
        model, size = source, source.ByteSize()
    else:
        model, files, size = open_model(source, structure=structure)
    # a model parsed here may lose its long lists to the graph (storage/long_lists.py); a caller's may not
    graph = import_onnx(model, long_lists_raw=not isinstance(source, onnx.ModelProto))
    if files is not None:
        _read_payloads_through(graph, files)
    make_names_unique(graph)
    return Workspace(graph, model, overridable=inputs_with_defaults(model), input_bytes=size, files=files)


def _read_payloads_through(graph: gs.Graph, files: ExternalFiles) -> None:
    """Give every constant whose payload is still in a file values that read it on demand."""
    for site in collect_constants(graph):
        values = held_values(site.tensor)
        if type(values) is LazyValues and values.tensor.data_location == onnx.TensorProto.EXTERNAL:
            hold_values(site.tensor, FileBackedValues(values.tensor, files))
