"""Every pair of documented quant options either runs or is refused in one line (exit 2): never
an internal error (exit 3), never a traceback, never a written file on refusal."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import builders
from onnxsurgery.cli import main

# One value per option (two for the three-way ones), as a user would type them.
CHOICES = [
    ["--dtype", "int4"], ["--dtype", "uint8"], ["--granularity", "tensor"], ["--granularity", "block"],
    ["--block-size", "16"], ["--symmetric"], ["--asymmetric"], ["--rounding", "balanced"], ["--lowering", "dq"],
    ["--lowering", "arith"], ["--lowering", "scaled"], ["--keep-quantized"], ["--target", "onnxruntime"],
    ["--target", "tensorrt"], ["--levels", "16"], ["--fp16"], ["--include", "W_*"], ["--exclude", "E"],
    ["--dynamic"], ["--no-merge"], ["--runtime", "onnxruntime-web"], ["--target", "onnxruntime-web"],
    ["--memory", "0.001"], ["--max-error", "0.5"],
]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("combos") / "in.onnx"
    onnx.save(builders.quant_cases(), str(path))
    np.savez(path.with_suffix(".npz"), ids=np.array([3, 77], np.int64), c=np.array(True))
    return path


@pytest.mark.parametrize("first, second", list(itertools.combinations(CHOICES, 2)),
                         ids=lambda args: "".join(args))
def test_every_pair_runs_or_is_refused_in_one_line(model_path, tmp_path, first, second):
    out = tmp_path / "q.onnx"
    args = ["-q", "quant", str(model_path), str(out), "--min-elements", "1024", "--inputs",
            str(model_path.with_suffix(".npz")), *first, *second]
    if "--dynamic" in first + second:
        args.remove("--min-elements"), args.remove("1024")
    r = CliRunner().invoke(main, args)
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 2:
        (line,) = r.output.strip().splitlines()
        assert line.startswith("onnxsurgery: error: ") and not out.exists()
    else:
        assert out.exists() and "Traceback" not in r.output


def test_dynamic_keeps_onnxruntimes_log_lines_off_the_terminal(tmp_path):
    model = builders.model([onnx.helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[2, 64])],
                           [builders.vi("y", shape=[2, 64])], [onnx.numpy_helper.from_array(builders.rand((64, 64), 1),
                                                                                           "W")])
    onnx.save(model, str(tmp_path / "in.onnx"))
    # a fresh process: pytest's own log capture would hide what a terminal shows
    proc = subprocess.run([sys.executable, "-m", "onnxsurgery", "quant", str(tmp_path / "in.onnx"),
                           str(tmp_path / "q.onnx"), "--dynamic"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr and "pre-processing" not in proc.stderr, proc.stderr
