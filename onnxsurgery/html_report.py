"""`report`: one self-contained HTML page (no network: data, styles and scripts inline) with
where the bytes are, what each method gives, and what downloads cost. The page is
report_page.html with the figures as JSON in it; it draws itself in the browser."""

from __future__ import annotations

import datetime
import json
import math
from importlib import resources

from .evaluate import BROTLI_QUALITY

PLACEHOLDER = "/*REPORT_DATA*/"


def render_page(data: dict) -> str:
    """The page for `data` (see api.report_file for its fields)."""
    template = resources.files(__package__).joinpath("report_page.html").read_text(encoding="utf-8")
    # "</" would end the <script> element early; "<\/" is the same string to JSON
    payload = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    return template.replace(PLACEHOLDER, payload, 1)


def page_data(model_path: str, inventory: dict, rows: list[dict], *, inputs: str, min_bytes: int) -> dict:
    import onnx
    import onnxruntime

    from . import __version__

    return {
        "model": {"name": model_path.replace("\\", "/").rsplit("/", 1)[-1], "path": model_path},
        "generated": datetime.date.today().isoformat(),
        "versions": {"onnxsurgery": __version__, "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__},
        "inputs": inputs,
        "min_bytes": min_bytes,
        "compression": {"gzip": 9, "brotli": BROTLI_QUALITY},
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
