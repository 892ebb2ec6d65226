"""onnxsurgery: make ONNX model files smaller without breaking them."""

from . import npy
from ._version import __version__ as __version__
from .logs import route_gs_logging
from .api import check_file, compare, embed_file, info, npy_file, quant, quant_file, run_model, shrink, shrink_file
from .html_report import report_file
from .graph_api import constants_to_npy, embed_npy, import_graph, keeps_weights_small, quantize_weights
from .pipeline import estimate_pipeline, finish, quant_pipeline, run_pipeline, shrink_pipeline
from .quant.options import QuantOptions
from .errors import InputError, OnnxSurgeryError, OutputError, UnsupportedModelError, VerificationError
from .io import export_model, load_model, save_model
from .passes.merge_constants import merge_duplicate_constants
from .passes.merge_transposed import merge_transposed_constants
from .passes.narrow_types import narrow_constants
from .report import PassReport, RunReport

route_gs_logging()  # gs's log lines through `logging`, not printed (logs.py)

__all__ = [
    "shrink",
    "shrink_file",
    "quant",
    "quant_file",
    "QuantOptions",
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
    "narrow_constants",
    "PassReport",
    "RunReport",
    "OnnxSurgeryError",
    "InputError",
    "OutputError",
    "UnsupportedModelError",
    "VerificationError",
]
