"""`report`: one self-contained HTML page (no network: data, styles and scripts inline) with
where the bytes are, what each method gives, and what downloads cost. The page is
report_page.html with the figures as JSON in it; it draws itself in the browser.

`report_file` is the `report` command: it sits above the API (evaluate.py makes each method's
file with the API's own functions), and the API does not import it."""

from __future__ import annotations

import datetime
import json
import math
import os
import tempfile
from importlib import resources

import numpy as np

from ._version import __version__
from .errors import InputError
from .defaults import METHOD_KEYS
from .evaluate import (BROTLI_QUALITY, EXACT_COMPRESSION_BYTES, METHODS, SAMPLE_PIECE_BYTES, SAMPLE_PIECES,
                       measure_methods)
from .inventory import inventory
from .api._common import os_errors
from .storage.staging import check_output_path, write_atomic

PLACEHOLDER = "/*REPORT_DATA*/"


@os_errors
def report_file(
    model_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    methods: tuple[str, ...] = METHOD_KEYS,
    samples: list[dict[str, np.ndarray]] | None = None,
    shapes: dict[str, list[int]] | None = None,
    inputs_file: str | None = None,
    shape_specs: tuple[str, ...] = (),
    min_bytes: int = 1024,
) -> dict:
    """Make each method's file (in a scratch folder beside the output, removed afterwards),
    measure it (evaluate.py), and write one self-contained HTML page (`render_page`)
    atomically. `inputs_file` and `shape_specs` are how the inputs were given on the command
    line, for the commands the page prints. Returns the page's data."""
    unknown = [m for m in methods if m not in METHOD_KEYS]
    if unknown:
        raise InputError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHOD_KEYS)}")
    out = check_output_path(model_path, output_path, in_place=False)
    where = inventory(model_path, min_bytes=min_bytes)
    chosen = tuple(m for m in METHODS if m.key in methods)
    with tempfile.TemporaryDirectory(prefix=".onnxsurgery-report-", dir=out.parent) as scratch:
        rows = measure_methods(model_path, scratch, methods=chosen, samples=samples, shapes=shapes,
                               inputs_file=inputs_file, shape_specs=shape_specs)
    if samples is None:
        described = "one generated sample (seed 0)"
    else:
        described = f"{len(samples)} sample{'s' * (len(samples) != 1)}"
        described += f" from {inputs_file}" if inputs_file else ""
    data = page_data(str(model_path), where, [r.to_dict() for r in rows], inputs=described, min_bytes=min_bytes)
    page = render_page(data)
    write_atomic(out, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return data


def render_page(data: dict) -> str:
    """The page for `data` (see report_file for its fields)."""
    template = resources.files(__package__).joinpath("report_page.html").read_text(encoding="utf-8")
    # "</" would end the <script> element early; "<\/" is the same string to JSON
    payload = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    return template.replace(PLACEHOLDER, payload, 1)


def page_data(model_path: str, inventory: dict, rows: list[dict], *, inputs: str, min_bytes: int) -> dict:
    import onnx
    import onnxruntime

    return {
        "model": {"name": model_path.replace("\\", "/").rsplit("/", 1)[-1], "path": model_path},
        "generated": datetime.date.today().isoformat(),
        "versions": {"onnxsurgery": __version__, "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__},
        "inputs": inputs,
        "min_bytes": min_bytes,
        "compression": {"gzip": 9, "brotli": BROTLI_QUALITY, "exact_up_to": EXACT_COMPRESSION_BYTES,
                        "sample": f"{SAMPLE_PIECES} evenly spaced pieces of {SAMPLE_PIECE_BYTES // 1024} KB"},
        "inventory": inventory,
        "methods": [_finite(r) for r in rows],
    }


def _finite(row: dict) -> dict:
    """NaN/Inf errors (an output that overflowed) are not JSON: they become None with a note."""
    out = dict(row)
    for key in ("rel_l2_error", "max_abs_error"):
        v = out.get(key)
        if isinstance(v, float) and not math.isfinite(v):
            out[key] = None
            out["failed"] = out.get("failed") or "outputs hold NaN or Inf"
    return out
