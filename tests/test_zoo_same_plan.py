"""Invariant 12's last look (zoo/same_plan.py): the shipped model's plan applied to a 16-bit
variant's weights. On a tiny model built here: the transplanted plan runs on the bfloat16
variant and gives the variant's own error where the plans agree; a plan the storage made worse
still fails against it; a refusal passes only where the shipped plan is refused too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_zoo_draws import _judge, _model  # noqa: E402

from zoo import invariants, same_plan, variants  # noqa: E402


def _quant(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True)


def _plan(src: Path, tmp: Path) -> str:
    r = _quant(src, tmp / "dry.onnx", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_shipped_plan_on_the_variants_weights(tmp_path):
    src = _model(tmp_path / "m.onnx")
    (tmp_path / "bf16").mkdir()
    bf16 = variants.bf16(src, tmp_path / "bf16")
    plan = same_plan.transplanted(_plan(src, tmp_path), _plan(bf16, tmp_path))
    assert {w["name"] for w in plan["weights"]} == {"w0__bf16", "w1__bf16"}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert _quant(bf16, tmp_path / "own.onnx").returncode == 0
    r = _quant(bf16, tmp_path / "shipped_plan.onnx", "--plan", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stderr
    own = {"rc": 0, "error": _judge(bf16, tmp_path / "own.onnx")["error"]}
    shipped = {"rc": 0, "error": _judge(bf16, tmp_path / "shipped_plan.onnx")["error"]}
    assert own["error"] == shipped["error"] > 0  # the same decisions on the same weights
    assert same_plan.no_worse_than_shipped_plan(own, shipped, invariants.HALF_FACTOR)
    # a plan the storage made worse (one scale per tensor) fails against the shipped decisions
    assert _quant(bf16, tmp_path / "tensor.onnx", "--granularity", "tensor", "--no-verify").returncode == 0
    worse = {"rc": 0, "error": _judge(bf16, tmp_path / "tensor.onnx")["error"]}
    assert not same_plan.no_worse_than_shipped_plan(worse, shipped, invariants.HALF_FACTOR), (worse, shipped)


def test_float16_entries_take_the_variants_own():
    shipped = {"version": 1, "weights": [{"name": "a", "dtype": "int8"}, {"name": "b", "dtype": "float16"}]}
    variant = {"version": 1, "weights": [{"name": "a__bf16", "dtype": "int8", "axis": 0},
                                         {"name": "b__bf16", "dtype": "float", "why": "left in its 16 bits"}]}
    plan = same_plan.transplanted(json.dumps(shipped), json.dumps(variant))
    assert plan["weights"] == [{"name": "a__bf16", "dtype": "int8"},
                               {"name": "b__bf16", "dtype": "float", "why": "left in its 16 bits"}]
    with pytest.raises(KeyError):
        same_plan.transplanted(json.dumps(shipped), json.dumps({"weights": [variant["weights"][0]]}))


def test_a_refusal_passes_only_where_the_shipped_plan_is_refused_too():
    refused, written = {"rc": 2}, {"rc": 0, "error": 0.01}
    assert same_plan.no_worse_than_shipped_plan(refused, refused, 1.5)
    assert not same_plan.no_worse_than_shipped_plan(refused, written, 1.5)
    assert not same_plan.no_worse_than_shipped_plan(written, {"rc": None, "note": "no plan"}, 1.5)
    assert same_plan.no_worse_than_shipped_plan({"rc": 0, "error": 0.014}, written, 1.5)
    assert not same_plan.no_worse_than_shipped_plan({"rc": 0, "error": 0.016}, written, 1.5)
