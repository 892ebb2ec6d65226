"""The memory rule's kept MatMul weights compute in float in onnxruntime's default CPU session
(issue 55, lowerings/dq_float.py): DequantizeLinear -> Reshape -> MatMul is not fused into
MatMulNBits, whose activations are int8, so the default session computes what a session with
no graph optimizations computes, from the same integers, which stay in memory at load."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from test_load_memory import _optimized_ops, matmuls


def _run(path, feeds, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_kept_weights_compute_in_float_in_the_default_session(tmp_path):
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(matmuls(), str(src))
    report = onnxsurgery.quant_file(src, out, min_elements=1024)
    assert {w["name"] for w in report.weights if w["lowering"] == "dq_float"} == {"Up", "Down"}
    assert "MatMulNBits" not in _optimized_ops(out)
    feeds = builders.feeds_for(matmuls())
    default = _run(out, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    unfused = _run(out, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    np.testing.assert_allclose(default, unfused, rtol=1e-5, atol=1e-6)  # float arithmetic either way


def test_a_bfloat16_weight_behind_casts_takes_the_same_form(tmp_path):
    """A bfloat16 weight read through a Cast to float32: the Reshape feeds the MatMul behind the
    Cast, and the Cast goes."""
    w = numpy_helper.from_array(builders.rand((256, 64), 3) * 0.1, "W")
    w = helper.make_tensor("W", onnx.TensorProto.BFLOAT16, [256, 64],
                           vals=numpy_helper.to_array(w).astype(np.float32), raw=False)
    nodes = [helper.make_node("Cast", ["W"], ["w32"], to=onnx.TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w32"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[1, 16, 256])], [builders.vi("y", shape=[1, 16, 64])], [w])
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, min_elements=1024)
    assert [w["lowering"] for w in report.weights] == ["dq_float"]
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert "Cast" not in ops and ops.count("Reshape") == 1
    assert "MatMulNBits" not in _optimized_ops(out)
    assert report.verification["rel_l2_error"] < 0.02
