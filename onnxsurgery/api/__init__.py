"""The Python API: one function per command. Models in (path, ModelProto or gs.Graph), a new
ModelProto and a report out. Nothing here writes files unless it says so.

One module per command: shrinking (shrink, shrink_file), quantizing (quant, quant_file, quant_plan), npy
(npy_file, embed_file, run_model), check (check_file), inspecting (info, compare); _common
holds what they share. `report` (html_report.report_file) is a layer above: it runs these
commands to measure what they make, and nothing here imports it."""

from .check import check_file
from .inspecting import compare, info
from .npy import embed_file, npy_file, run_model
from .quantizing import quant, quant_file, quant_plan
from .shrinking import shrink, shrink_file

__all__ = ["shrink", "shrink_file", "quant", "quant_file", "quant_plan", "info", "npy_file", "embed_file", "run_model",
           "check_file", "compare"]
