"""bench/run_cost.py (issue 58, inputs13): each session setting measured in a process of its own,
one run per sample of the .npz."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]


def test_run_cost_runs_each_sample_under_each_setting(tmp_path):
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], initializer=[weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    x = np.ones((1, 16), np.float32)
    np.savez(tmp_path / "s.npz", x__0=x, x__1=x, x__2=x)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "run_cost.py"), str(tmp_path / "m.onnx"),
                           str(tmp_path / "s.npz"), "--rounds", "1"], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(" session")[0].split(" ", 2)[2].strip() for line in lines] == \
        ["default", "one thread", "arena", "arena, one thread"]
    for line in lines:  # three samples: three runs, each cpu/sys/wall
        runs = line.split("(cpu/sys/wall) ")[1].split("  cpu")[0].split()
        assert len(runs) == 3 and all(len(r.split("/")) == 3 for r in runs)
