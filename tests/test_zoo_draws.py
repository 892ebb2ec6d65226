"""Invariant 12's draws (zoo/draws.py, issue 55) on a tiny model built here: a draw moves each
weight by about what bfloat16 rounds it by, and a 16-bit variant that the storage made worse
still fails against the draws' median, while the variant as the zoo builds it passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo import decisions, draws, invariants, variants  # noqa: E402

FEEDS = [{"x": np.random.default_rng(7).standard_normal((16, 64)).astype(np.float32)}]


def test_a_draw_moves_weights_by_bfloat16s_rounding():
    w = np.random.default_rng(0).standard_normal(50_000).astype(np.float32) * 0.05
    w[:10] = 0
    moved = draws.jittered(w, np.random.default_rng(1), draws.MANTISSA_BITS["bf16"])
    bits = w.view(np.uint32)
    rounded = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    nonzero = w != 0
    rel_draw = np.abs(moved - w)[nonzero] / np.abs(w[nonzero])
    rel_bf16 = np.abs(rounded - w)[nonzero] / np.abs(w[nonzero])
    assert np.all(moved[~nonzero] == 0)
    assert rel_draw.max() <= 2.0 ** -8 and rel_bf16.max() <= 2.0 ** -8
    assert abs(np.sqrt(np.mean(rel_draw ** 2)) / np.sqrt(np.mean(rel_bf16 ** 2)) - 1) < 0.05  # the same size
    assert not np.array_equal(moved, rounded)  # but not the rounding itself
    assert np.array_equal(draws.rounded(w, None, 7), rounded)  # to nearest: what the bf16 variant stores
    stochastic = draws.rounded(w, np.random.default_rng(2), 7)
    bits = stochastic.view(np.uint32)
    assert np.all(bits & 0xFFFF == 0) and not np.array_equal(stochastic, rounded)  # on the grid, another way


def _model(path: Path) -> Path:
    """Two MatMuls whose columns and rows differ in scale by up to ~50x: a per-tensor scale loses."""
    rng = np.random.default_rng(3)
    ws = [rng.standard_normal((64, 64)) * np.exp(rng.standard_normal(64) * 1.3)[None, :] for _ in range(2)]
    inits = [numpy_helper.from_array(w.astype(np.float32), f"w{i}") for i, w in enumerate(ws)]
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("MatMul", ["r", "w1"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])], inits)
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def _run(path: Path):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [dict(zip([o.name for o in s.get_outputs()], s.run(None, f))) for f in FEEDS]


def _quantize(*extra: str):
    def quantize(src: Path, out: Path) -> int:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        return subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), *extra],
                              cwd=ROOT, env=env, capture_output=True).returncode
    return quantize


def _judge(src: Path, out: Path) -> dict:
    return invariants.compare_runs(_run(src), _run(out), decisions.none, FEEDS)


def _error(src: Path, out: Path, quantize) -> float:
    assert quantize(src, out) == 0
    return _judge(src, out)["error"]


def _lose_a_weight(path: Path) -> None:
    """The written file with its largest integer weight zeroed: a storage that dropped a weight."""
    m = onnx.load(str(path))
    t = max((t for t in m.graph.initializer if t.data_type in (TensorProto.INT8, TensorProto.UINT8)),
            key=lambda t: np.prod(t.dims))
    t.CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(t)), t.name))
    onnx.save_model(m, str(path))


def test_the_draws_pass_the_variant_and_fail_a_storage_defect(tmp_path):
    src = _model(tmp_path / "m.onnx")
    shipped = _error(src, tmp_path / "shipped.q.onnx", _quantize())
    errors = draws.draw_errors(src, tmp_path / "draws", "bf16", invariants.HALF_DRAWS, _quantize(), _judge)
    assert len(errors) == invariants.HALF_DRAWS and all(e is not None and e > 0 for e in errors)
    assert not list((tmp_path / "draws").iterdir())  # each draw's files are gone once judged
    (tmp_path / "bf16").mkdir()
    bf16 = variants.bf16(src, tmp_path / "bf16")
    half = _error(bf16, tmp_path / "bf16.q.onnx", _quantize())
    assert invariants.half_width_holds(half, shipped, errors) == []
    # a plan that the storage changed for the worse: one scale per tensor instead of the default's
    worse = _error(bf16, tmp_path / "tensor.q.onnx", _quantize("--granularity", "tensor", "--no-verify"))
    fail = invariants.half_width_holds(worse, shipped, errors)
    assert fail and "median of 3 draws" in fail[0], (worse, shipped, errors)
    # a variant whose result lost a weight
    out = tmp_path / "lost.q.onnx"
    assert _quantize()(bf16, out) == 0
    _lose_a_weight(out)
    fail = invariants.half_width_holds(_judge(bf16, out)["error"], shipped, errors)
    assert fail and "median of 3 draws" in fail[0]
