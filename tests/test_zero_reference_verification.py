"""A verification whose reference computes only zeros compares nothing (zoo13). PP-OCRv4's seal
detector in float16 (the zoo's fp16 variant of ppocr_v4_seal_det): its probability map on the one
generated sample is all zeros (the sigmoid of a page of noise underflows float16), the result's too,
and `quant` reported "relative L2 0" where the written file errs 0.16 on real seal crops. A zero
reference's error is the result's own norm (running/output_errors.py), which is 0 again: no number
was measured, and the report says 0."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.cli import main


def _gated(hidden=128):
    """x @ W, then Relu(. - 1000): zero on any input of a generated sample's scale, not on all inputs."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Sub", ["m", "gate"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])], "gated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, hidden])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(1000), "gate")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_reference_of_zeros_is_no_measured_error(tmp_path):
    import onnx

    src, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(_gated(), src)
    r = CliRunner().invoke(main, ["quant", str(src), str(out), "--json", "--min-elements", "16"])
    assert r.exit_code == 0, r.output
    verification = json.loads(r.output)["verification"]
    # no number measured: the output is not compared, and the headline holds no error of 0
    assert verification["not_compared"] == ["y"], verification
    assert verification["rel_l2_error"] is None and verification["outputs"]["y"]["compared"] is False
    text = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q2.onnx"), "--min-elements", "16"]).output
    assert "output y was not compared" in text and "relative L2 0 " not in text, text


def test_zeros_the_result_does_not_repeat_are_compared(tmp_path):
    """A zero reference the result moves off: its error is the result's own norm, a number.
    y = x @ W - x @ Transpose(W^T) is zero in float; quantized, each copy rounds its own way."""
    import onnx

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((128, 128)) / np.sqrt(128)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Transpose", ["wt"], ["w2"]),
         helper.make_node("MatMul", ["x", "w2"], ["b"]), helper.make_node("Sub", ["a", "b"], ["y"])], "twice",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 128])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ascontiguousarray(w.T), "wt")])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    r = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q.onnx"), "--json", "--min-elements", "16",
                                  "--max-error", "1e9"])
    assert r.exit_code == 0, r.output
    verification = json.loads(r.output)["verification"]
    assert verification["not_compared"] == [] and verification["rel_l2_error"] > 0, verification
