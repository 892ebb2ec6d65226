"""--target tensorrt and the static check against onnx-tensorrt's operator list: what the target
emits passes the check and computes what the input did in onnxruntime; what TensorRT's parser
refuses (quant's default integer arithmetic, custom ops, restricted attributes) is found."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from conftest import run
from onnxsurgery.cli import main
from onnxsurgery.targets.tensorrt import check_tensorrt, operator_list


def _feeds():
    return {"ids": np.random.default_rng(0).integers(0, 512, (8, 1)).astype(np.int64)}


def _quant(tmp_path, model, **options):
    src, out = tmp_path / "in.onnx", tmp_path / "trt.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, min_elements=1024, target="tensorrt", **options)
    saved = onnx.load(str(out))
    onnx.checker.check_model(saved)
    return saved, out, report


def _rel(model, out):
    (a,), (b,) = run(model, _feeds()), run(out, _feeds())
    return float(np.linalg.norm(b - a) / np.linalg.norm(a))


def _weights_dequantized(saved):
    inits = {t.name: t for t in saved.graph.initializer}
    dq = [n for n in saved.graph.node if n.op_type == "DequantizeLinear"]
    return inits, dq, {n.output[0]: n for n in dq}


def test_int8_target_is_symmetric_per_channel_dq_for_conv_matmul_gemm_only(tmp_path):
    model = builders.tensorrt_prep_model()
    saved, out, report = _quant(tmp_path, model)
    q = report.pass_report("quantize")
    # table (Gather) and the LSTM's W and R: float16 with a Cast back, no quantized form there
    assert q.details["schemes"] == {"int8/channel/sym/dq": 3, "fp16/cast": 3}
    assert saved.opset_import[0].version == 13  # upgraded, and verified, for per-channel DQ
    inits, dq, by_output = _weights_dequantized(saved)
    readers = {n.op_type: by_output[n.input[1]] for n in saved.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")}
    assert set(readers) == {"MatMul", "Gemm", "Conv"}
    # axis: the output channel of each reader (MatMul B [K, N]: 1; Gemm transB [N, K]: 0; Conv: 0)
    assert {op: helper.get_attribute_value(n.attribute[0]) for op, n in readers.items()} == \
        {"MatMul": 1, "Gemm": 0, "Conv": 0}
    for n in dq:
        assert inits[n.input[0]].data_type == TensorProto.INT8
        assert inits[n.input[1]].data_type == TensorProto.FLOAT  # scales: float32 initializers
        assert len(n.input) == 2  # no zero point: symmetric
    assert not any(n.op_type in ("BitShift", "Sub") for n in saved.graph.node)
    casts = [n for n in saved.graph.node if n.op_type == "Cast"]
    assert sorted(inits[n.input[0]].name for n in casts) == ["R_fp16", "W_fp16", "table_fp16"]
    assert all(inits[n.input[0]].data_type == TensorProto.FLOAT16 for n in casts)
    why = q.details["float16_for_tensorrt"]
    assert why["table"].startswith("target tensorrt: read by Gather")
    assert why["W"].startswith("target tensorrt: read by LSTM")
    narrow = report.pass_report("narrow")  # int64 constants narrowed where exact and allowed
    assert {s.name: s.reason for s in narrow.skipped}["flat"] == "Reshape input 1 must be tensor(int64)"
    assert report.target_check["refused"] == [] and report.target_check["target"].startswith("TensorRT 10")
    assert check_tensorrt(saved) == []
    assert "as TensorRT computes" in report.verification["runtime"]
    assert _rel(model, out) < 0.02


def test_int4_target_blocks_matmul_and_gemm_weights_at_opset_21(tmp_path):
    model = builders.tensorrt_prep_model()
    saved, out, report = _quant(tmp_path, model, dtype="int4")
    q = report.pass_report("quantize")
    assert {k: v for k, v in q.details["schemes"].items() if k.startswith("int4")} == {"int4/block32/sym/dq": 2}
    assert saved.opset_import[0].version == 21
    inits, dq, _ = _weights_dequantized(saved)
    for n in dq:
        assert inits[n.input[0]].data_type == TensorProto.INT4 and len(inits[n.input[0]].dims) == 2
        assert len(n.input) == 2
        assert {a.name for a in n.attribute} >= {"block_size", "axis"}  # blockwise, never per channel
    assert q.details["schemes"]["fp16/cast"] == 4  # table, W, R, and Wc: 4-bit weights not for Conv
    assert q.details["float16_for_tensorrt"]["Wc"].startswith("target tensorrt: read by Conv")
    assert check_tensorrt(saved) == [] and report.target_check["refused"] == []
    assert _rel(model, out) < 0.2


def test_default_output_is_what_tensorrt_refuses(tmp_path):
    """The default int8 lowering multiplies 8-bit integers after a Cast; int4 under `arith`
    unpacks nibbles with BitShift. The check names both."""
    model = builders.tensorrt_prep_model()
    src, default, int4 = tmp_path / "in.onnx", tmp_path / "q.onnx", tmp_path / "q4.onnx"
    onnx.save(model, str(src))
    onnxsurgery.quant_file(src, default, min_elements=1024)
    onnxsurgery.quant_file(src, int4, min_elements=1024, lowering="arith", dtype="int4")
    found = [str(f) for f in check_tensorrt(onnx.load(str(default)))]
    assert any(f.startswith("Cast ") and "reads INT8 tensor 'Wm_q'" in f for f in found), found
    found = [str(f) for f in check_tensorrt(onnx.load(str(int4)))]
    assert any(f.startswith("BitShift ") and "not supported by TensorRT 10" in f for f in found), found


@pytest.mark.parametrize("options, message", [
    ({"dtype": "uint8"}, "int8 or int4"),
    ({"symmetric": False}, "symmetric"),
    ({"lowering": "arith"}, "DequantizeLinear"),
    ({"granularity": "block"}, "blocks are for int4"),
])
def test_target_tensorrt_refuses_what_its_parser_would(options, message):
    with pytest.raises(ValueError, match=message):
        onnxsurgery.QuantOptions(target="tensorrt", **options)


def _one_node(node, inputs, outputs, inits=(), opset=17, domain_opsets=()):
    """One node, unchecked: some cases are what the check must find, not valid ONNX."""
    graph = helper.make_graph([node], "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                             + [helper.make_opsetid(d, v) for d, v in domain_opsets])


def test_check_finds_unsupported_ops_custom_domains_attributes_and_zero_points():
    x, y = builders.vi("x", shape=[1, 4, 8, 8]), builders.vi("y")
    cases = {
        "Unique": _one_node(helper.make_node("Unique", ["x"], ["y"]), [x], [y]),
        "custom op": _one_node(helper.make_node("Gelu2", ["x"], ["y"], domain="com.example"), [x], [y],
                               domain_opsets=[("com.example", 1)]),
        "dilations": _one_node(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2]),
                               [x], [y]),
        "x_zero_point": _one_node(
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]), [], [y],
            [numpy_helper.from_array(np.ones((4,), np.int8), "q"), numpy_helper.from_array(np.float32(0.1), "s"),
             numpy_helper.from_array(np.int8(3), "z")]),
        "reads INT8": _one_node(
            helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT), [], [y],
            [numpy_helper.from_array(np.ones((4,), np.int8), "q")]),
        "outside": _one_node(helper.make_node("Relu", ["x"], ["y"]), [x], [y], opset=8),
        "layout": _one_node(helper.make_node("LSTM", ["x3", "W", "R"], ["y"], hidden_size=2, layout=1),
                            [builders.vi("x3", shape=[1, 1, 2])], [y],
                            [numpy_helper.from_array(builders.rand((1, 8, 2), 0), "W"),
                             numpy_helper.from_array(builders.rand((1, 8, 2), 1), "R")]),
    }
    for expected, model in cases.items():
        findings = [str(f) for f in check_tensorrt(model)]
        assert len(findings) >= 1 and any(expected in f for f in findings), (expected, findings)
    clean = _one_node(helper.make_node("Relu", ["x"], ["y"]), [x], [y])
    assert check_tensorrt(clean) == []
    # activation Q/DQ as TensorRT's explicit quantization writes it: int8 zero points of 0
    qdq = builders.model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                          helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
                         [x], [builders.vi("y", shape=[1, 4, 8, 8])],
                         [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int8(0), "z")],
                         opset=13)
    assert check_tensorrt(qdq) == []


def test_operator_list_is_checked_in_with_its_source_and_date():
    listing = operator_list()
    assert listing["release"].startswith("TensorRT 10") and listing["retrieved"]
    assert listing["source"].startswith("https://github.com/onnx/onnx-tensorrt/")
    ops = listing["operators"]
    assert ops["BitShift"]["supported"] is False and ops["DequantizeLinear"]["supported"] is True
    assert "INT4" in ops["DequantizeLinear"]["types"] and len(ops) > 150


def test_cli_check_prints_one_line_per_finding_and_exits_1(tmp_path):
    model = builders.tensorrt_prep_model()
    src, q = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    runner = CliRunner()
    clean = runner.invoke(main, ["check", str(src)])
    assert clean.exit_code == 0 and "0 findings against TensorRT 10" in clean.output
    assert runner.invoke(main, ["quant", str(src), str(q), "--min-elements", "1024"]).exit_code == 0
    found = runner.invoke(main, ["check", str(q)])
    assert found.exit_code == 1
    lines = found.output.strip().splitlines()
    assert all(line.startswith(f"{q}: ") for line in lines) and len(lines) >= 2
    as_json = json.loads(runner.invoke(main, ["check", str(q), "--json"]).output)
    assert as_json["refused"] and as_json["source"].startswith("https://")
    missing = runner.invoke(main, ["check", str(tmp_path / "nope.onnx")])
    assert missing.exit_code == 2 and missing.output.count("\n") == 1


def test_graph_api_takes_the_target_at_the_opset_it_needs():
    graph = onnxsurgery.import_graph(builders.tensorrt_prep_model(opset=13))
    report = onnxsurgery.quantize_weights(graph, target="tensorrt", min_elements=1024)
    assert report.details["schemes"] == {"int8/channel/sym/dq": 3, "fp16/cast": 3}
    assert check_tensorrt(onnxsurgery.finish(graph)) == []
    low = onnxsurgery.import_graph(builders.tensorrt_prep_model(opset=12))
    with pytest.raises(onnxsurgery.UnsupportedModelError, match="opset 13"):
        onnxsurgery.quantize_weights(low, target="tensorrt", min_elements=1024)


def test_a_weight_beyond_float16s_range_stays_float32_under_tensorrt():
    """A table TensorRT takes no quantized form of goes float16, unless float16 cannot hold it."""
    model = builders.tensorrt_prep_model(opset=13)
    table = next(t for t in model.graph.initializer if t.name == "table")
    values = numpy_helper.to_array(table).copy()
    values[0, 0] = 1e6
    table.CopyFrom(numpy_helper.from_array(values, "table"))
    graph = onnxsurgery.import_graph(model)
    report = onnxsurgery.quantize_weights(graph, target="tensorrt", min_elements=1024)
    assert "table" not in report.details["float16_for_tensorrt"]
    assert {s.name: s.reason for s in report.skipped}["table"].endswith("values beyond float16's range")
    assert report.details["schemes"]["fp16/cast"] == 2  # the LSTM's W and R


def test_dry_run_under_tensorrt_prints_the_plan_the_run_applies(tmp_path):
    """--dry-run with the narrowing step after the quantizer (it crashed on that step)."""
    src = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(), str(src))
    result = CliRunner().invoke(main, ["quant", str(src), "--target", "tensorrt", "--min-elements", "1024",
                                       "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.output)["weights"]
    _, _, report = _quant(tmp_path, builders.quant_cases())
    assert planned == report.to_dict()["weights"]
    assert any(w["lowering"] == "dq" for w in planned)
