"""`quant --dynamic` says so where onnxruntime's quantize_dynamic quantized nothing (zoo9: chars2vec,
whose LSTM kernels tf2onnx passes into its Loop bodies as loop-carried values, came back as they
were, the file 0.1% larger, with no word of it)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery

NOTE = "quantize_dynamic quantized no weight"


def _model(in_loop: bool) -> onnx.ModelProto:
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((64, 64)) * 0.1).astype(np.float32), "W")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])
    if not in_loop:
        g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "plain", [x], [y], [w])
    else:
        # W goes into the body as a loop-carried value, as tf2onnx writes a Keras LSTM's kernels
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond"], ["cond_out"]),
             helper.make_node("MatMul", ["h", "w_in"], ["h_out"]),
             helper.make_node("Identity", ["w_in"], ["w_out"])],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 64]),
             helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [64, 64])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [2, 64]),
             helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [64, 64])])
        trip = numpy_helper.from_array(np.array(2, np.int64), "trip")
        g = helper.make_graph([helper.make_node("Loop", ["trip", "", "x", "W"], ["y", "w_last"], body=body)], "loop",
                              [x], [y], [w, trip])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_note_where_quantize_dynamic_reaches_no_weight(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_model(in_loop=True), str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", dynamic=True)
    assert any(NOTE in n for n in report.notes), report.notes


def test_no_such_note_where_it_quantizes(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_model(in_loop=False), str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", dynamic=True)
    assert not any(NOTE in n for n in report.notes), report.notes
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}
