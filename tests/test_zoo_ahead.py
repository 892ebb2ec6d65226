"""Issue 55's count in the zoo's docs (zoo/tables.py): onnx-shrink-ray ahead of the default
`quant` on the report set, and on the tune set too where both were measured there."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo import tables  # noqa: E402


def _model(name, ours, ray, ours_tune=None, ray_tune=None, ray_size=100):
    quant = {"error": ours, "size": 100} | ({"tune_error": ours_tune} if ours_tune is not None else {})
    peer = {"handles": True, "error": ray, "size": ray_size} | ({} if ray_tune is None else {"tune_error": ray_tune})
    return {"name": name, "variants": {"shipped": {"commands": {"quant": quant}}}, "peers": {"shrink_ray": peer}}


def test_ahead_on_the_report_set_and_on_both():
    results = {"models": [_model("luck", 0.02, 0.01, 0.01, 0.02),  # reverses on the tune set
                          _model("trails", 0.02, 0.01, 0.03, 0.02),  # behind on both
                          _model("ours", 0.01, 0.02),  # ours ahead
                          _model("larger", 0.02, 0.01, ray_size=130),  # its file past 1.2x ours
                          {"name": "no peer", "variants": {}, "peers": {}}]}
    line = tables.shrink_ray_ahead(results)[-1]
    assert "on 2 of 4 models, on both sets on 1" in line
    assert "luck (0.01 against 0.02; tune set 0.02 against 0.01)" in line
    assert "trails (0.01 against 0.02; tune set 0.02 against 0.03) on both sets" in line
    assert "larger" not in line and "ours (" not in line
    assert tables.shrink_ray_ahead({"models": []}) == []
