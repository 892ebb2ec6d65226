"""bench/phases.py (issue 58): one `quant` run's phases timed, its output the command's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]


def _matmul_model(path: Path) -> None:
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], initializer=[weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_phases_names_the_sessions_runs_and_writing(tmp_path):
    _matmul_model(tmp_path / "m.onnx")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "phases.py"), "-q", "quant", str(tmp_path / "m.onnx"),
                           str(tmp_path / "q.onnx"), "--min-elements", "16"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "q.onnx").is_file()
    rows = [line.split()[0:2] for line in done.stderr.splitlines()]
    assert ["ort", "session"] in rows and ["ort", "run"] in rows  # the reference's and the result's
    assert ["write_checked", "(+check)"] in rows and ["compare_models", "MainThread"] in rows
    assert done.stderr.splitlines()[-1].startswith("total")
