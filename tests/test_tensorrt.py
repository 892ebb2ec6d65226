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
from onnxsurgery.targets.tensorrt import SHARED_DQ, check_tensorrt, operator_list


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
    # table (Gather) and the LSTM's W and R: float16 with a Cast back, no quantized form there;
    # the others equalized: DequantizeLinear per output channel, the layer's input times r
    assert q.details["schemes"] == {"int8/channel/sym/dq_equalized": 3, "fp16/cast": 3}
    muls = [n for n in saved.graph.node if n.op_type == "Mul"]
    assert len(muls) == 3 and {n.output[0] for n in muls} <= \
        {n.input[0] for n in saved.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")}
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


def test_int4_target_blocks_of_128_or_64_else_int8_per_channel_at_opset_21(tmp_path):
    """TensorRT's INT4 blocks are 64 or 128 (default 128, as Model Optimizer's): Wg's K = 128
    takes 128, Wm's K = 32 takes neither, so Wm is int8 per channel and its plan says why."""
    model = builders.tensorrt_prep_model()
    saved, out, report = _quant(tmp_path, model, dtype="int4")
    q = report.pass_report("quantize")
    assert {k: v for k, v in q.details["schemes"].items() if k.startswith("int")} == \
        {"int4/block128/sym/dq": 1, "int8/channel/sym/dq": 1}
    assert saved.opset_import[0].version == 21
    why = {w["name"]: w["why"] for w in report.to_dict()["weights"]}
    assert why["Wm"] == ("int8 per channel, not int4: TensorRT's INT4 blocks are 64 or 128, and neither 128 nor 64 "
                         "divides its blocked axis (32)")
    inits, dq, by_output = _weights_dequantized(saved)
    gemm = next(n for n in saved.graph.node if n.op_type == "Gemm")
    blocked = by_output[gemm.input[1]]
    assert inits[blocked.input[0]].data_type == TensorProto.INT4 and len(inits[blocked.input[0]].dims) == 2
    assert {a.name: helper.get_attribute_value(a) for a in blocked.attribute} == {"block_size": 128, "axis": 1}
    assert all(len(n.input) == 2 for n in dq)  # no zero points
    assert all(numpy_helper.to_array(inits[n.input[1]]).min() > 0 for n in dq)  # positive scales
    assert q.details["schemes"]["fp16/cast"] == 4  # table, W, R, and Wc: 4-bit weights not for Conv
    assert q.details["float16_for_tensorrt"]["Wc"].startswith("target tensorrt: read by Conv")
    assert check_tensorrt(saved) == [] and report.target_check["refused"] == []
    assert _rel(model, out) < 0.2


def _matmuls(k: int, n: int = 64, readers: int = 1, seed: int = 0):
    """x [4, k] -> MatMul W [k, n] (and more MatMuls reading the same W, each through a Relu
    of the one before, where k == n)."""
    nodes, x = [], "x"
    for i in range(readers):
        nodes.append(helper.make_node("MatMul", [x, "W"], [f"y{i}"]))
        if i < readers - 1:
            nodes.append(helper.make_node("Relu", [f"y{i}"], [f"r{i}"]))
            x = f"r{i}"
    return builders.model(nodes, [builders.vi("x", shape=[4, k])], [builders.vi(f"y{readers - 1}", shape=[4, n])],
                          [numpy_helper.from_array(builders.rand((k, n), seed) * 0.1, "W")])


@pytest.mark.parametrize("k, asked, block", [(256, None, 128), (192, None, 64), (256, 64, 64)])
def test_int4_block_size_is_one_tensorrt_takes(tmp_path, k, asked, block):
    model = _matmuls(k)
    options = {"dtype": "int4"} | ({"block_size": asked} if asked else {})
    saved, out, report = _quant(tmp_path, model, **options)
    (dq,) = [n for n in saved.graph.node if n.op_type == "DequantizeLinear"]
    assert helper.get_attribute_value(next(a for a in dq.attribute if a.name == "block_size")) == block
    assert check_tensorrt(saved) == []
    sess_feeds = {"x": builders.rand((4, k), 9)}
    (a,), (b,) = run(model, sess_feeds), run(out, sess_feeds)
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.2


@pytest.mark.parametrize("block_size", [32, 16, 256])
def test_target_tensorrt_refuses_block_sizes_it_does_not_take(tmp_path, block_size):
    with pytest.raises(ValueError, match="TensorRT's supported INT4 block sizes are 64 and 128"):
        onnxsurgery.QuantOptions(target="tensorrt", dtype="int4", block_size=block_size)
    src = tmp_path / "in.onnx"
    onnx.save(_matmuls(256), str(src))
    result = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "out.onnx"), "--target", "tensorrt",
                                       "--dtype", "int4", "--block-size", str(block_size)])
    assert result.exit_code == 2 and "64 and 128" in result.output and "Traceback" not in result.output


def test_default_target_keeps_blocks_of_32():
    """Only the tensorrt target changed its block size: the default's int4 stays at 32."""
    assert onnxsurgery.QuantOptions(dtype="int4").block_size == 32
    assert onnxsurgery.QuantOptions(dtype="int4", target="tensorrt").block_size == 128


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
    assert report.details["schemes"] == {"int8/channel/sym/dq_equalized": 3, "fp16/cast": 3}
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
    assert any(w["lowering"] in ("dq", "dq_equalized") for w in planned)


def _dq_model(q: np.ndarray, scale: np.ndarray, *, opset=21, readers=1, zero_point=None, **attrs):
    """W = DequantizeLinear(q, scale[, zero_point], attrs) read by `readers` MatMuls of x; saved
    unchecked, as the check must see models onnx's checker would refuse too."""
    inits = [q if isinstance(q, onnx.TensorProto) else numpy_helper.from_array(q, "q"),
             numpy_helper.from_array(scale, "s")]
    inputs = ["q", "s"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(zero_point, "z"))
        inputs.append("z")
    nodes = [helper.make_node("DequantizeLinear", inputs, ["w"], name="dq", **attrs)]
    nodes += [helper.make_node("MatMul", ["x", "w"], [f"y{i}"], name=f"mm{i}") for i in range(readers)]
    graph = helper.make_graph(nodes, "g", [builders.vi("x")], [builders.vi(f"y{i}") for i in range(readers)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _int4(shape) -> onnx.TensorProto:
    return helper.make_tensor("q", TensorProto.INT4, list(shape), np.zeros(int(np.prod(shape)), np.int8).tolist())


PAGE = 'TensorRT 10.x, "Working with Quantized Types"'


@pytest.mark.parametrize("case, expected", [
    ("block 32", '"the supported block sizes are 64 and 128"'),
    ("int8 blocks", "block quantization is for INT4 weights only"),
    ("negative scale", "scales must be positive"),
    ("zero point", '"TensorRT uses a symmetric quantization scheme"'),
    ("int4 per channel", "TensorRT takes INT4 weights with per-block scales only"),
    ("3-D blocks on axis 0", "along the last or second-to-last dimension"),
    ("opset 19", "blocked DequantizeLinear needs opset 21"),
])
def test_check_reports_each_documented_rule_with_its_page(case, expected):
    scales = np.full((64, 2), 0.1, np.float32)
    model = {
        "block 32": lambda: _dq_model(_int4((64, 128)), np.full((64, 4), 0.1, np.float32), axis=1, block_size=32),
        "int8 blocks": lambda: _dq_model(np.ones((64, 128), np.int8), scales, axis=1, block_size=64),
        "negative scale": lambda: _dq_model(np.ones((64, 128), np.int8), np.array([0.1, -0.1] * 32, np.float32),
                                            axis=0),
        "zero point": lambda: _dq_model(np.ones((64, 128), np.int8), np.float32(0.1), zero_point=np.int8(1)),
        "int4 per channel": lambda: _dq_model(_int4((64, 128)), np.full(64, 0.1, np.float32), axis=0),
        "3-D blocks on axis 0": lambda: _dq_model(_int4((128, 4, 64)), np.full((2, 4, 64), 0.1, np.float32), axis=0,
                                                  block_size=64),
        "opset 19": lambda: _dq_model(_int4((64, 128)), scales, opset=19, axis=1, block_size=64),
    }[case]()
    found = [str(f) for f in check_tensorrt(model)]
    hits = [f for f in found if expected in f]
    assert hits and all(f.startswith("DequantizeLinear 'dq': ") for f in hits), found
    if case != "opset 19":  # opset 19 is ONNX's rule for the attribute, not a TensorRT page's
        assert all(PAGE in f for f in hits), hits


def test_check_passes_what_tensorrt_documents():
    """INT4 in blocks of 64 or 128 along the last or second-to-last axis, positive scales,
    no zero point, opset 21; int8 per channel: no finding."""
    for block in (64, 128):
        ok = _dq_model(_int4((64, 256)), np.full((64, 256 // block), 0.1, np.float32), axis=1, block_size=block)
        assert check_tensorrt(ok) == []
    assert check_tensorrt(_dq_model(np.ones((64, 128), np.int8), np.full(128, 0.1, np.float32), axis=1)) == []


def test_check_finds_a_weight_dequantizelinear_shared_by_several_readers():
    shared = _dq_model(np.ones((64, 128), np.int8), np.full(128, 0.1, np.float32), axis=1, readers=3)
    found = [str(f) for f in check_tensorrt(shared)]
    assert found == [f"DequantizeLinear 'dq': output read by 3 nodes: {SHARED_DQ}"]
    assert "DedicatedQDQPair" in found[0] and "one per reader" in found[0]


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_a_shared_weight_gets_one_dequantizelinear_per_reader_over_one_initializer(tmp_path, dtype):
    """ALBERT's case: one weight read by several layers. --target tensorrt writes one
    DequantizeLinear per reader, all reading the same integers and scale: the file holds the
    weight once, each layer has the DequantizeLinear TensorRT fuses into it, and onnxruntime
    runs it (a crash that onnxruntime PR #28326 reports for shared DQ initializers would show)."""
    model = _matmuls(128, 128, readers=3)
    saved, out, report = _quant(tmp_path, model, dtype=dtype)
    dq = [n for n in saved.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 3 and len({n.output[0] for n in dq}) == 3
    assert len({tuple(n.input) for n in dq}) == 1  # the same integers and scale
    matmul_inputs = [n.input[1] for n in saved.graph.node if n.op_type == "MatMul"]
    assert sorted(matmul_inputs) == sorted(n.output[0] for n in dq)  # one each
    integers = [t for t in saved.graph.initializer if t.data_type in (TensorProto.INT8, TensorProto.INT4)]
    assert len(integers) == 1 and report.pass_report("quantize").changed == 1
    assert check_tensorrt(saved) == [] and report.target_check["refused"] == []
    feeds = {"x": builders.rand((4, 128), 5)}
    (a,), (b,) = run(model, feeds), run(out, feeds)
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < (0.03 if dtype == "int8" else 0.3)


def test_default_target_still_shares_one_dequantizelinear(tmp_path):
    """The rule is TensorRT's: elsewhere one DequantizeLinear feeds every reader (--keep-quantized)."""
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_matmuls(128, 128, readers=3), str(src))
    onnxsurgery.quant_file(src, out, min_elements=1024, keep_quantized=True)
    assert sum(n.op_type == "DequantizeLinear" for n in onnx.load(str(out)).graph.node) == 1


def test_float16_for_weights_per_channel_int8_serves_worst(tmp_path):
    """A weight whose channels each hold one large column (as silero-vad's re-parameterized
    convolutions do) loses far more per channel than in blocks: float16 under --target tensorrt,
    with the reason; an ordinary weight beside it stays int8."""
    rng = np.random.default_rng(0)
    spiky = (rng.standard_normal((256, 64)) * 0.01).astype(np.float32)
    spiky[:32] *= 100  # the first 32 input rows far larger: every output channel's scale set by them
    plain = (rng.standard_normal((64, 512)) * 0.1).astype(np.float32)
    model = builders.model([helper.make_node("MatMul", ["x", "Ws"], ["h"]),
                            helper.make_node("MatMul", ["h", "Wp"], ["y"])],
                           [builders.vi("x", shape=[4, 256])], [builders.vi("y", shape=[4, 512])],
                           [numpy_helper.from_array(spiky, "Ws"), numpy_helper.from_array(plain, "Wp")])
    saved, out, report = _quant(tmp_path, model)
    why = {w["name"]: (w["dtype"], w["why"]) for w in report.to_dict()["weights"]}
    assert why["Ws"][0] == "float16" and "loses" in why["Ws"][1] and "per-channel int8" in why["Ws"][1]
    assert why["Wp"][0] == "int8"
    assert check_tensorrt(saved) == []


def test_shrink_for_tensorrt_says_what_merging_means_and_checks_the_result(tmp_path):
    """Two MatMuls reading equal weights under two names: shrink merges them; with --target
    tensorrt it says what that means there, and checks the result as `check` does."""
    w = numpy_helper.to_array(_matmuls(64, 64).graph.initializer[0])
    model = builders.model([helper.make_node("MatMul", ["x", "W0"], ["h"]),
                            helper.make_node("MatMul", ["h", "W1"], ["y"])],
                           [builders.vi("x", shape=[4, 64])], [builders.vi("y", shape=[4, 64])],
                           [numpy_helper.from_array(w, "W0"), numpy_helper.from_array(w.copy(), "W1")])
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    result = CliRunner().invoke(main, ["shrink", str(src), str(out), "--target", "tensorrt"])
    assert result.exit_code == 0, result.output
    assert "note: for TensorRT: merged constants are read by several layers" in result.output
    assert "DequantizeLinear nodes are not merged" in result.output
    assert "checked against TensorRT 10" in result.output
    assert len(onnx.load(str(out)).graph.initializer) == 1
    plain = CliRunner().invoke(main, ["shrink", str(src), str(tmp_path / "plain.onnx")])
    assert plain.exit_code == 0 and "TensorRT" not in plain.output


def test_tensorrt_small_weight_rule_is_the_defaults():
    from onnxsurgery.quantization.choices import tensorrt_float16, weights

    assert tensorrt_float16.SMALL_WEIGHT_ELEMENTS == weights.SMALL_WEIGHT_ELEMENTS
    assert tensorrt_float16.SMALL_FLOAT16_SHARE == weights.SMALL_FLOAT16_SHARE


def test_a_tensorrt_dry_run_plan_applies_as_written(tmp_path):
    """`--dry-run --json` under --target tensorrt, given back as --plan: dq_equalized records too."""
    src, plan, out = tmp_path / "in.onnx", tmp_path / "plan.json", tmp_path / "out.onnx"
    onnx.save(builders.tensorrt_prep_model(), str(src))
    runner = CliRunner()
    planned = runner.invoke(main, ["quant", str(src), "--target", "tensorrt", "--min-elements", "1024", "--dry-run",
                                   "--json"])
    assert planned.exit_code == 0 and "dq_equalized" in planned.output
    plan.write_text(planned.output)
    applied = runner.invoke(main, ["quant", str(src), str(out), "--target", "tensorrt", "--plan", str(plan)])
    assert applied.exit_code == 0, applied.output
    assert check_tensorrt(onnx.load(str(out))) == []


def test_check_reads_large_scales_from_a_saved_model(tmp_path):
    """A file's scales are read by value however large (positive scales), and the CLI names the
    operator list's release and date and the documentation's pages."""
    n, k = 1024, 128 * 72  # 73,728 block scales: more than check's small tensors
    scales = np.full((n, k // 128), 0.1, np.float32)
    scales[3, 5] = -0.1
    model = _dq_model(_int4((n, k)), scales, axis=1, block_size=128)
    path = tmp_path / "neg.onnx"
    onnx.save(model, str(path))
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1 and "1 scale zero, negative or NaN: scales must be positive" in result.output
    last = [line for line in result.output.strip().splitlines() if ": next: " not in line][-1]
    assert "TensorRT 10.15" in last and "retrieved 2026-" in last and '"Working with Quantized Types"' in last
