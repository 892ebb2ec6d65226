"""A verification that compares nothing: where the original's output holds no finite value on any
sample verification ran, NaN == NaN everywhere gave an error of 0 and 100% argmax agreement. It
is said instead (a warning line, `not_compared` and `compared: false` in --json), and the headline
error is None where nothing in it was compared; quant still writes its result."""

from __future__ import annotations

import json

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import helper

import builders
from onnxsurgery.cli import main
from onnxsurgery.running.sessions import session

HIDDEN = 64


def _hollow(threshold: float, classes: int = HIDDEN) -> onnx.ModelProto:
    """logits = (x @ W) * log(n - threshold), and kept = x @ V: NaN everywhere in `logits` where the
    input is no longer than `threshold`, numbers in `kept`."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("MatMul", ["x", "v"], ["kept"]),
        *builders.log_of_length("x", threshold, "scale"),
        helper.make_node("Mul", ["h", "scale"], ["logits"]),
    ]
    inits = [onnx.numpy_helper.from_array(builders.rand((HIDDEN, classes), 1), "w"),
             onnx.numpy_helper.from_array(builders.rand((HIDDEN, HIDDEN), 2), "v")]
    return builders.model(nodes, [builders.vi("x", shape=[1, "n", HIDDEN])],
                          [builders.vi("logits", shape=[1, "n", classes]), builders.vi("kept", shape=[1, "n", HIDDEN])],
                          inits)


def _quant(tmp_path, model, *args):
    path, out = tmp_path / "hollow.onnx", tmp_path / "q.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(main, ["quant", str(path), str(out), *args])
    assert result.exit_code == 0, result.output
    assert out.exists()
    return path, out, result.output


def test_an_output_of_nan_everywhere_is_not_compared(tmp_path):
    path, out, printed = _quant(tmp_path, _hollow(1e9), "--json")
    assert np.isnan(session(str(path)).run(["logits"], {"x": np.ones((1, 4, HIDDEN), np.float32)})[0]).all()
    verification = json.loads(printed)["verification"]
    assert verification["not_compared"] == ["logits"]
    logits, kept = verification["outputs"]["logits"], verification["outputs"]["kept"]
    assert logits["compared"] is False and "argmax_agreement" not in logits  # no 100% of nothing
    assert "compared" not in kept
    # the headline is the compared output's error, not a 0 of the hollow one's
    assert verification["rel_l2_error"] == kept["rel_l2_error"] > 0


def test_a_headline_of_nothing_compared_is_none_and_the_report_says_so(tmp_path):
    _, out, printed = _quant(tmp_path, _hollow(1e9), "--outputs", "logits", "--max-error", "0.01")
    assert "logits: not compared" in printed
    assert "warning: output logits was not compared" in printed
    _, _, printed = _quant(tmp_path, _hollow(1e9), "--outputs", "logits", "--json")
    verification = json.loads(printed)["verification"]
    assert verification["rel_l2_error"] is None and verification["max_abs_error"] is None


def test_an_output_with_numbers_is_compared(tmp_path):
    _, _, printed = _quant(tmp_path, _hollow(-1.0), "--json")
    verification = json.loads(printed)["verification"]
    assert verification["not_compared"] == []
    assert all("compared" not in e for e in verification["outputs"].values())
    assert verification["outputs"]["logits"]["rel_l2_error"] > 0
