"""The Python API: one function per command. Models in (path, ModelProto or gs.Graph), a new
ModelProto and a report out. Nothing here writes files unless it says so.

One module per command: shrinking (shrink, shrink_file), quantizing (quant, quant_file, quant_plan), npy
(npy_file, embed_file, run_model), check (check_file), inspecting (info, compare); _common
holds what they share. `report` (html_report.report_file) is a layer above: it runs these
commands to measure what they make, and nothing here imports it.

Each function's module is imported when the function is first asked for (PEP 562): `shrink`
never imports check.py's onnxruntime nor quant's planner (0.2 s of a 1.6 s shrink of ALBERT)."""

from __future__ import annotations

import importlib

_HOMES = {"shrink": "shrinking", "shrink_file": "shrinking", "quant": "quantizing", "quant_file": "quantizing",
          "quant_plan": "quantizing", "info": "inspecting", "compare": "inspecting", "npy_file": "npy",
          "embed_file": "npy", "run_model": "npy", "check_file": "check"}

__all__ = ["shrink", "shrink_file", "quant", "quant_file", "quant_plan", "info", "npy_file", "embed_file", "run_model",
           "check_file", "compare"]


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
