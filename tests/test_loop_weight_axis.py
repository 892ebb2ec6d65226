"""A weight passed into a Loop body (tf2onnx writes a Keras LSTM's kernels so: chars2vec, zoo9)
is kept quantized as a DequantizeLinear before the Loop, which dequantizes it whole: its scales
may run along any axis, and choices/channel_axis.py now chooses it as for a weight before a Conv
or an LSTM. It kept axis 0 before, the rows of a [K, N] MatMul weight: chars2vec's recurrent
kernel took 1.3x less error per column, and its worst relative L2 on 16 fresh samples went
0.0065 -> 0.0047 (onnx-shrink-ray 0.0046)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery


def loop_model() -> onnx.ModelProto:
    """x [2, 64] -> Loop (3 trips): h = (h @ W)[:, :64], W [64, 256] a loop-carried input whose
    columns differ in size by up to e^6 (per row, every scale is set by the largest columns)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 256)) * 0.1).astype(np.float32)
    w *= np.exp(rng.uniform(-3, 3, 256)).astype(np.float32)[None, :]
    consts = [numpy_helper.from_array(np.array([v], np.int64), n)
              for n, v in (("starts", 0), ("ends", 64), ("axes", 1))]
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("MatMul", ["h", "w_in"], ["m"]),
         helper.make_node("Slice", ["m", "starts", "ends", "axes"], ["h_out"]),
         helper.make_node("Identity", ["w_in"], ["w_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 64]),
         helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [64, 256])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [2, 64]),
         helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [64, 256])], consts)
    g = helper.make_graph([helper.make_node("Loop", ["trip", "", "x", "W"], ["y", "w_last"], body=body)], "loop",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(3, np.int64), "trip")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_weight_passed_into_a_loop_takes_the_axis_that_loses_less(tmp_path):
    src, out = tmp_path / "loop.onnx", tmp_path / "q.onnx"
    onnx.save(loop_model(), str(src))
    (w,) = [w for w in onnxsurgery.quant_plan(src, min_elements=1024).weights if w.name == "W"]
    assert (w.dtype, w.granularity, w.lowering, w.axis) == ("int8", "channel", "dq", 1), w
    assert "less error" in w.why
    onnxsurgery.quant_file(src, out, min_elements=1024)
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32) * 0.1
    ref, got = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                for p in (src, out))
    assert np.all(np.isfinite(got)) and np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05
