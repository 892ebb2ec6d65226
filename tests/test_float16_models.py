"""Models that compute in float16: their weights' chains are folded by onnxruntime at load (float32
arithmetic, then a Cast: its CPU provider has no float16 Sub or Mul); not the scale after the
reader, whose unscaled float16 output can overflow; every option works, the opset upgrade checked
at float16's precision."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import builders
from onnx import helper, numpy_helper
import onnxsurgery
from onnxsurgery.api.quant_steps import upgrade_tolerance


def _feeds():
    return [{"ids": np.array([3, 77], np.int64), "c": np.array(True)}]


@pytest.fixture
def float16_model(tmp_path):
    path = tmp_path / "in16.onnx"
    onnx.save(builders.quant_cases(weight_dtype=np.float16), str(path))
    return path


def _unfolded(path, tmp_path) -> list[str]:
    """Nodes that onnxruntime's CPU provider left in the graph although they compute from constants
    alone: work done at every inference that session start should have done once. The Casts to
    float32 it inserts itself before its float32-only kernels (the original's weights too) aside."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "folded.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    graph = onnx.load(so.optimized_model_filepath).graph
    constant = {t.name for t in graph.initializer}
    left = []
    for node in graph.node:  # topologically sorted
        if node.input and all(i in constant for i in node.input if i):
            constant.update(node.output)
            if not node.name.startswith("InsertedPrecisionFreeCast"):
                left.append(node.op_type)
    return left


def test_float16_weights_are_folded_at_load(tmp_path, float16_model):
    """The arith chain of a float16 weight computes in float32 and ends in a Cast: onnxruntime's CPU
    provider has no float16 Sub or Mul kernel, and a float16 chain ran at every inference (a float16
    Conv tagger from PyPI, slovorez: 2.9x its original's latency)."""
    report = onnxsurgery.quant_file(float16_model, tmp_path / "q.onnx", min_elements=1024, samples=_feeds())
    labels = {e["name"]: e["scheme"] for e in report.pass_report("quantize").details["largest_errors"]}
    # arith_equalized: the arith chain with the input-side scales r folded in (storage11)
    assert labels["W_mm"].endswith(("/arith", "/arith_equalized")) and labels["W_const"].endswith(
        ("/arith", "/arith_equalized"))
    assert _unfolded(tmp_path / "q.onnx", tmp_path) == []
    graph = onnx.load(str(tmp_path / "q.onnx")).graph
    assert not any(t.data_type == onnx.TensorProto.FLOAT for t in graph.initializer
                   if t.name.endswith("_scale") and not t.name.endswith("_input_scale"))  # r: a vector
    # as accurate as the same command on the float32 model, within 1.5x
    src32 = tmp_path / "in32.onnx"
    onnx.save(builders.quant_cases(), str(src32))
    report32 = onnxsurgery.quant_file(src32, tmp_path / "q32.onnx", min_elements=1024, samples=_feeds())
    assert report.verification["rel_l2_error"] <= 1.5 * report32.verification["rel_l2_error"]


def test_no_float16_overflow_before_the_scale(tmp_path):
    """A float16 Conv with a bias 1/scale times larger than float16 holds (issue 59: a float16
    segmentation net, every output NaN, written with exit 0): the lean form is not `scaled`
    there, and the verified result is finite and close, with --inputs as without."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((64, 32, 3, 3)) * 5e-4).astype(np.float16)
    w2 = (rng.standard_normal((64, 64, 3, 3)) * 5e-4).astype(np.float16)
    bias = (rng.standard_normal(64) * 40).astype(np.float16)
    nodes = [helper.make_node("Cast", ["x"], ["xh"], to=onnx.TensorProto.FLOAT16),
             helper.make_node("MaxPool", ["xh"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p0", "W1", "B1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "W2"], ["c2"], pads=[1] * 4),
             helper.make_node("Cast", ["c2"], ["y"], to=onnx.TensorProto.FLOAT)]
    model = builders.model(nodes, [builders.vi("x", shape=[1, 32, 32, 32])], [builders.vi("y", shape=[1, 64, 8, 8])],
                           [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(bias, "B1"),
                            numpy_helper.from_array(w2, "W2")], opset=13)
    src = tmp_path / "conv16.onnx"
    onnx.save(model, str(src))
    samples = [{"x": np.random.default_rng(s).standard_normal((1, 32, 32, 32)).astype(np.float32)} for s in (1, 2)]
    for given in (None, samples):
        report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", samples=given)
        # not `scaled`: its float16 arithmetic's equalized form, folded at load (storage11)
        assert {w["name"]: w["lowering"] for w in report.weights if w["dtype"] == "int8"} == {
            "W1": "arith_equalized", "W2": "arith_equalized"}
        assert report.verification["rel_l2_error"] < 0.02


@pytest.mark.parametrize("options", [{"dtype": "int4"}, {"keep_quantized": True}, {"target": "tensorrt"},
                                     {"fp16": False, "levels": 64}, {"lowering": "arith"}, {"dtype": "uint8"}])
def test_every_option_works_on_a_float16_model(tmp_path, float16_model, options):
    report = onnxsurgery.quant_file(float16_model, tmp_path / "q.onnx", min_elements=1024, samples=_feeds(),
                                    **options)
    assert report.pass_report("quantize").changed >= 3
    assert report.verification["rel_l2_error"] < 0.15


def test_the_upgrade_check_is_as_tight_as_the_models_float_type():
    m32, m16 = builders.quant_cases(), builders.quant_cases(weight_dtype=np.float16)
    assert upgrade_tolerance(m32) == 1e-5 and 1e-4 < upgrade_tolerance(m16) < 1e-2


def test_the_opset_upgrade_leaves_the_weights_in_the_file(tmp_path, monkeypatch):
    """quant's opset upgrade (4-bit DequantizeLinear needs 21) converts the model with its large
    payloads left in the input file: the whole model is never loaded for it (a 359 MB encoder's
    int4 run peaked at 2.56 GB, now 128 MB with --no-verify). The result is what it was."""
    from onnxsurgery.api import quant_steps

    def whole_model(*args, **kwargs):
        raise AssertionError("the upgrade loaded the whole model")

    src = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(opset=17), str(src))
    monkeypatch.setattr(quant_steps, "load_model", whole_model)
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", dtype="int4", min_elements=1024, samples=_feeds())
    assert onnx.load(str(tmp_path / "q.onnx")).opset_import[0].version == 21
    assert any(n.startswith("upgraded opset 17 -> 21") for n in report.notes)
    assert report.verification["rel_l2_error"] < 0.15


def test_bfloat16_weights_read_through_casts_take_the_lean_form(tmp_path):
    """A bfloat16 checkpoint exported as bf16 weights -> Cast to float32 -> MatMul: the int8 form
    feeds the MatMuls in float32 directly (the Casts go), the scale after them, so nothing is
    folded into extra float copies at load (issue 37: 2.38x the bf16 model's memory before)."""
    from onnx import TensorProto, helper

    w = builders.rand((128, 128), 1) * 0.1
    bf16 = helper.make_tensor("W", TensorProto.BFLOAT16, w.shape,
                              (w.view(np.uint32) >> 16).astype(np.uint16).tobytes(), raw=True)
    nodes = [helper.make_node("Cast", ["W"], ["Wf"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "Wf"], ["h"]), helper.make_node("MatMul", ["h", "Wf"], ["y"])]
    graph = helper.make_graph(nodes, "g", [builders.vi("x", shape=[4, 128])], [builders.vi("y", shape=[4, 128])],
                              [bf16])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "in.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", min_elements=1024)
    (record,) = [r for r in report.weights if r["name"] == "W"]
    assert record["lowering"] == "scaled"  # zero points where its float32 values get them (test_half_plans.py)
    saved = onnx.load(str(tmp_path / "q.onnx")).graph
    assert not any(t.data_type == TensorProto.BFLOAT16 for t in saved.initializer)
    casts = [n for n in saved.node if n.op_type == "Cast"]
    assert len(casts) == 1 and casts[0].attribute[0].i == TensorProto.FLOAT  # the int8 one, feeding both MatMuls
    assert report.verification["rel_l2_error"] < 0.02


def test_int4_on_a_model_with_external_data(tmp_path):
    """Every tensor in a .data file beside the model, small ones too (the onnxruntime-genai
    builder writes them so): the upgraded, quantized model writes and verifies (it failed with
    KeyError: 'location' when a bias next to a 4-bit weight was read through gs's `.values`)."""
    onnx.save(builders.quant_cases(opset=17), str(tmp_path / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.onnx.data", size_threshold=0)
    for options in ({"dtype": "int4"}, {"dtype": "int4", "target": "onnxruntime"}, {}):
        report = onnxsurgery.quant_file(tmp_path / "m.onnx", tmp_path / "q.onnx", min_elements=1024,
                                        samples=_feeds(), **options)
        assert report.pass_report("quantize").changed >= 3 and report.verification["rel_l2_error"] < 0.15


@pytest.mark.parametrize("command", ["quant", "shrink"])
def test_an_output_declared_float_beside_a_float16_value_info_stays_float(tmp_path, command):
    """onnxconverter_common's float16 with keep_io_types can leave a value_info entry of the
    output's name in float16 beside the graph output declared float (PP-OCRv6 rec from paddle2onnx):
    onnxruntime goes by the declaration; gs took the value_info's type, the written output said
    float16 where its final Cast makes float, and onnxruntime refused to load the result."""
    w = builders.rand((64, 64), 1).astype(np.float16)
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=onnx.TensorProto.FLOAT16),
             helper.make_node("MatMul", ["x16", "W"], ["h"]), helper.make_node("MatMul", ["h", "W2"], ["h2"]),
             helper.make_node("Cast", ["h2"], ["y"], to=onnx.TensorProto.FLOAT)]
    model = builders.model(nodes, [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 64])],
                           [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w, "W2")])
    model.graph.value_info.append(builders.vi("y", onnx.TensorProto.FLOAT16, [2, 64]))
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    getattr(onnxsurgery, f"{command}_file")(src, out, **({"min_elements": 1024} if command == "quant" else {}))
    written = onnx.load(str(out))
    assert written.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    import onnxruntime as ort
    y = ort.InferenceSession(str(out)).run(None, {"x": builders.rand((2, 64), 2)})[0]
    assert y.dtype == np.float32
