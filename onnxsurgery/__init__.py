"""onnxsurgery: make ONNX model files smaller without breaking them.

The public names load on first use (PEP 562 `__getattr__`): `import onnxsurgery` and
`onnxsurgery --help` load neither onnx nor onnxruntime nor the quantizers, and
`from onnxsurgery import quant_file` or `onnxsurgery.quant_file(...)` imports what that
function needs. A submodule is an attribute too (`onnxsurgery.storage`), loaded when first asked for.
"""

from __future__ import annotations

import importlib
import sys
import types

from ._version import __version__ as __version__

__all__ = [
    "shrink",
    "shrink_file",
    "quant",
    "quant_file",
    "quant_plan",
    "quant_folder",
    "shrink_folder",
    "QuantRequest",
    "QuantOptions",
    "QuantRun",
    "Decision",
    "Budget",
    "Inputs",
    "Verification",
    "Output",
    "Plan",
    "WeightPlan",
    "report_file",
    "compare",
    "check_file",
    "info",
    "npy_file",
    "embed_file",
    "run_model",
    "npy",
    "load_model",
    "save_model",
    "export_model",
    "import_graph",
    "finish",
    "run_pipeline",
    "estimate_pipeline",
    "shrink_pipeline",
    "quant_pipeline",
    "quantize_weights",
    "constants_to_npy",
    "embed_npy",
    "keeps_weights_small",
    "merge_duplicate_constants",
    "merge_transposed_constants",
    "merge_reshaped_constants",
    "fold_shape_only_constants",
    "narrow_constants",
    "PassBase",
    "PassManager",
    "MergeDuplicates",
    "MergeTransposed",
    "MergeReshaped",
    "FoldShapeOnly",
    "Narrow",
    "HalfWidth",
    "CastWeights",
    "BypassIdentities",
    "QuantizeWeights",
    "ShrinkRun",
    "NpyRun",
    "PassReport",
    "RunReport",
    "OnnxSurgeryError",
    "InputError",
    "OutputError",
    "UnsupportedModelError",
    "VerificationError",
    "OptionError",
    "PlanError",
    "UnsafeLocationError",
]

# The module each public name comes from (a submodule of this package), by name.
_HOMES = {
    **dict.fromkeys(["shrink", "shrink_file", "quant", "quant_file", "quant_plan", "compare", "check_file", "info",
                     "npy_file", "embed_file", "run_model"], "api"),
    **dict.fromkeys(["quant_folder", "shrink_folder"], "api.folders"),
    "report_file": "html_report",
    "QuantOptions": "quantization.options",
    "QuantRequest": "quantization.request",
    **dict.fromkeys(["QuantRun", "Decision", "Budget", "Inputs", "Verification", "Output"], "run_options"),
    **dict.fromkeys(["Plan", "WeightPlan"], "quantization.plan"),
    **dict.fromkeys(["import_graph", "quantize_weights", "constants_to_npy", "embed_npy", "keeps_weights_small"],
                    "graph_api"),
    **dict.fromkeys(["finish", "run_pipeline", "estimate_pipeline", "shrink_pipeline", "quant_pipeline"], "pipeline"),
    **dict.fromkeys(["InputError", "OnnxSurgeryError", "OutputError", "UnsupportedModelError", "VerificationError",
                     "OptionError", "PlanError", "UnsafeLocationError"], "errors"),
    "load_model": "storage.io",
    "export_model": "export",
    "save_model": "storage.staging",
    "npy": "storage",  # the .npy module (storage/npy.py), public by this name since before storage/
    **dict.fromkeys(["merge_duplicate_constants", "merge_transposed_constants", "merge_reshaped_constants",
                     "fold_shape_only_constants", "narrow_constants"], "graph_api"),
    "MergeDuplicates": "passes.merge_constants",
    "MergeTransposed": "passes.merge_transposed",
    "MergeReshaped": "passes.merge_reshaped",
    "FoldShapeOnly": "passes.shape_only",
    "Narrow": "passes.narrow_types",
    "HalfWidth": "passes.half_width",
    "CastWeights": "passes.cast_weights",
    "BypassIdentities": "passes.bypass_identity",
    "QuantizeWeights": "passes.quantize_weights",
    **dict.fromkeys(["PassBase", "PassManager"], "passes.base"),
    **dict.fromkeys(["ShrinkRun", "NpyRun"], "run_options"),
    **dict.fromkeys(["PassReport", "RunReport"], "report"),
}


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    elif name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:  # a submodule (`npy`, `io`, `api`, ...)
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """This package's module object, for what Python does when it binds a submodule here
    (`setattr(onnxsurgery, "api", <module onnxsurgery.api>)`, on that submodule's first import):
    onnx-graphsurgeon's log lines are routed through `logging` (logs.py) as soon as gs is
    loaded, by whichever submodule loads it, before gs can print anything for onnxsurgery."""

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        _route_gs_logging()


_gs_logging_routed = False


def _route_gs_logging() -> None:
    """gs's messages through `logging` (logs.py), once gs is loaded; importing it here would cost
    `import onnxsurgery` a tenth of a second."""
    global _gs_logging_routed
    if not _gs_logging_routed and "onnx_graphsurgeon" in sys.modules:
        _gs_logging_routed = True
        from .logs import route_gs_logging

        route_gs_logging()


sys.modules[__name__].__class__ = _Package
_route_gs_logging()  # gs imported before onnxsurgery
