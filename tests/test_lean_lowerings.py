"""The lowerings that keep memory down where the model runs: `scaled` (the int8 default: scale
after the consumer), MatMulNBits (--target onnxruntime), DequantizeLinear (--keep-quantized),
Identity bypass, and option validation. Results are checked in a real onnxruntime session."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from conftest import run
from onnxsurgery.cli import main
from onnxsurgery.quantization.options import QuantOptions


@pytest.fixture(autouse=True)
def _lean_forms_alone(monkeypatch):
    """These tests are about the lean forms themselves. On their tiny models, which have no
    embedding table to save memory elsewhere, the load-memory rule (quantization/choices/load_memory.py,
    tests/test_load_memory.py) would keep the MatMul weights quantized in memory instead."""
    from onnxsurgery.quantization.choices import load_memory, planner  # noqa: F401 - planner's imports read it first

    monkeypatch.setattr(load_memory, "EXTRA_AT_LOAD", {})


def _quant(tmp_path, model, **options):
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, **{"min_elements": 1024, **options})
    saved = onnx.load(str(out))
    onnx.checker.check_model(saved)
    return saved, out, report


def _rel(model, out, feeds):
    (a,), (b,) = run(model, feeds), run(out, feeds)
    return float(np.linalg.norm(b - a) / np.linalg.norm(a))


def _readers_model():
    """A MatMul weight, a Gemm weight with transB and C, and a Conv weight whose bias is a
    Constant node (how PP-OCR stores it)."""
    x = "x"
    nodes = [helper.make_node("MatMul", [x, "Wm"], ["m"]),
             helper.make_node("Gemm", ["m", "Wg", "C"], ["g"], transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Reshape", ["g", "shape"], ["img"]),
             builders.const_node("B", builders.rand((32,), 4)),
             helper.make_node("Conv", ["img", "Wc", "B"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(builders.rand((64, 128), 1) * 0.1, "Wm"),
             numpy_helper.from_array(builders.rand((256, 128), 2) * 0.1, "Wg"),
             numpy_helper.from_array(builders.rand((256,), 3), "C"),
             numpy_helper.from_array(np.array([1, 16, 4, 4], np.int64), "shape"),
             numpy_helper.from_array(builders.rand((32, 16, 3, 3), 5) * 0.1, "Wc")]
    return builders.model(nodes, [builders.vi("x", shape=[1, 64])], [builders.vi("y", shape=[1, 32, 4, 4])], inits)


def test_scaled_lowering_applies_the_scale_after_each_reader(tmp_path):
    model = _readers_model()
    saved, out, report = _quant(tmp_path, model, lowering="scaled")
    q = report.pass_report("quantize")
    assert q.details["schemes"] == {"int8/channel/sym/scaled": 3}
    ops = [n.op_type for n in saved.graph.node]
    # a Mul after each reader (the output channel's scale) and one before it on its data input
    # (the input-side equalization; Gemm without transA and a one-group Conv take it too)
    assert ops.count("Cast") == 3 and ops.count("Mul") == 6
    before = [n for n in saved.graph.node if n.op_type == "Mul" and "scale_before" in n.name]
    readers_of = {n.input[0]: n.op_type for n in saved.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")}
    assert sorted(readers_of[m.output[0]] for m in before) == ["Conv", "Gemm", "MatMul"]
    assert "Sub" not in ops and "Reshape" in ops  # only the model's own Reshape
    int8 = [t for t in saved.graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert sorted(list(t.dims) for t in int8) == [[32, 16, 3, 3], [64, 128], [256, 128]]
    # each Cast feeds a reader directly (nothing weight-sized is computed from it before)
    casts = {n.output[0] for n in saved.graph.node if n.op_type == "Cast"}
    readers = [n for n in saved.graph.node if set(n.input) & casts]
    assert sorted(n.op_type for n in readers) == ["Conv", "Gemm", "MatMul"]
    assert _rel(model, out, builders.feeds_for(model)) < 0.01
    assert report.verification["rel_l2_error"] < 0.01


def test_memory_budget_goes_to_the_weight_that_loses_most_when_lean(tmp_path, monkeypatch):
    """B has outlier blocks (per channel is far less accurate than blocks there, A 1.4x). With
    room for one weight's accurate chain (three float copies more than lean at load), B gets
    it; with the default share of two equal weights' bytes there is room for none. Without
    inputs the ratio is the weight's own, held to MIN_ACCURATE_RATIO_IN_WEIGHT; with inputs,
    the layer output's, held to MIN_ACCURATE_RATIO, or the weight's own, as without them."""
    from onnxsurgery.quantization.choices import lean as lean_choice, weights

    monkeypatch.setattr(weights, "SMALL_WEIGHT_ELEMENTS", 0)  # the measured ratio alone
    model = builders.outlier_model()
    _, _, report = _quant(tmp_path, model)
    q = report.pass_report("quantize").details
    assert q["lean_lowering"] == ["A", "B"] and q["accurate_lowering"] == []
    monkeypatch.setattr(lean_choice, "ACCURATE_MEMORY_SHARE", 2.0)  # 16 bytes a weight element: one chain
    _, _, report = _quant(tmp_path, model)
    q = report.pass_report("quantize").details
    assert q["lean_lowering"] == ["A"] and q["accurate_lowering"] == ["B"]
    schemes = {e["name"]: e["scheme"] for e in q["largest_errors"]}
    assert schemes["A"].startswith("int8/channel/") and schemes["A"].endswith("/scaled")  # zero points or not
    assert schemes["B"] == "int8/block32/asym/arith"
    assert report.verification["rel_l2_error"] < 0.03
    # without inputs the ratio is measured in the weight and held to MIN_ACCURATE_RATIO_IN_WEIGHT
    monkeypatch.setattr(lean_choice, "MIN_ACCURATE_RATIO", 100.0)
    _, _, report = _quant(tmp_path, model)
    assert report.pass_report("quantize").details["accurate_lowering"] == ["B"]
    monkeypatch.setattr(lean_choice, "MIN_ACCURATE_RATIO_IN_WEIGHT", 100.0)  # neither loses that much
    _, _, report = _quant(tmp_path, model)
    assert report.pass_report("quantize").details["accurate_lowering"] == []
    # with inputs, the layers' outputs (MIN_ACCURATE_RATIO) or the weight's own ratio (held to
    # MIN_ACCURATE_RATIO_IN_WEIGHT, as without inputs): the chain where either says so
    samples = [builders.feeds_for(model, seed) for seed in range(3)]  # calibration.MIN_CHOICE_SAMPLES
    _, _, report = _quant(tmp_path, model, samples=samples)
    assert report.pass_report("quantize").details["accurate_lowering"] == []  # neither does
    monkeypatch.setattr(lean_choice, "MIN_ACCURATE_RATIO_IN_WEIGHT", 1.0)
    _, _, report = _quant(tmp_path, model, samples=samples)
    assert report.pass_report("quantize").details["accurate_lowering"] == ["B"]  # the weight's alone
    monkeypatch.setattr(lean_choice, "MIN_ACCURATE_RATIO_IN_WEIGHT", 100.0)
    monkeypatch.setattr(lean_choice, "MIN_ACCURATE_RATIO", 1.0)
    _, _, report = _quant(tmp_path, model, samples=samples)
    assert report.pass_report("quantize").details["accurate_lowering"] == ["B"]  # the layer output's alone


def test_input_side_equalization_helps_weights_with_outlier_rows(tmp_path):
    """A weight whose rows differ in range (row 7 is 40x larger): scaling the reader's input by
    r and dividing the weight's rows by r quantizes it far better than one scale per output
    channel alone; the model still computes the same in onnxruntime, within the error reported."""
    from onnxsurgery.quantization.lowerings.scaled import EQUALIZE_ALPHA
    from onnxsurgery.quantization.rounding import quantize, weight_error

    w = builders.rand((256, 64), 1) * 0.05
    w[7] *= 40.0
    r = np.abs(w).max(axis=1) ** EQUALIZE_ALPHA
    plain = weight_error(w, quantize(w, granularity="channel", axis=1, symmetric=True))["rel_l2_error"]
    qt = quantize(w / r[:, None], granularity="channel", axis=1, symmetric=True)
    qt.input_scale, qt.input_axis = r.astype(np.float32), 0
    assert weight_error(w, qt)["rel_l2_error"] < 0.5 * plain
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[4, 256])],
                           [builders.vi("y", shape=[4, 64])], [numpy_helper.from_array(w, "W")])
    saved, out, report = _quant(tmp_path, model, lowering="scaled")  # symmetric: auto might add zero points
    assert report.pass_report("quantize").details["lean_lowering"] == ["W"]
    (scale_before,) = [n for n in saved.graph.node if "scale_before" in n.name]
    r_saved = numpy_helper.to_array(next(t for t in saved.graph.initializer if t.name == scale_before.input[1]))
    np.testing.assert_allclose(r_saved, r, rtol=1e-6)
    err = report.pass_report("quantize").details["largest_errors"][0]["rel_l2_error"]
    assert err == pytest.approx(weight_error(w, qt)["rel_l2_error"], rel=1e-3)
    assert _rel(model, out, builders.feeds_for(model)) < 2 * err + 1e-3


def _offset_readers_model(opset: int) -> onnx.ModelProto:
    """Every reader the zero-point term handles: MatMul on a 3-D input, Gemm with transA, transB,
    alpha and C, a 3x3 Conv with pads, stride 2, dilation and bias, and a 1x1 Conv. Each weight
    has a per-output-channel offset, which a symmetric range spends half its levels on."""
    def offset(shape, seed, axis):
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return (builders.rand(shape, seed) * 0.05 + builders.rand((shape[axis],), seed + 10).reshape(view)) \
            .astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "Wm"], ["m"]),  # x [2, 8, 384] -> [2, 8, 96]
             helper.make_node("Reshape", ["m", "s2"], ["m2"]),  # [16, 96]
             helper.make_node("Transpose", ["m2"], ["mt"], perm=[1, 0]),  # [96, 16]: A for transA
             helper.make_node("Gemm", ["mt", "Wg", "C"], ["g"], transA=1, transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Reshape", ["g", "s4"], ["img"]),  # [1, 16, 32, 32]
             helper.make_node("Conv", ["img", "Wc", "B"], ["c"], pads=[2, 1, 2, 1], strides=[2, 1],
                              dilations=[2, 1], kernel_shape=[3, 3]),
             helper.make_node("Conv", ["c", "W1"], ["y"])]  # Wc 36,864 elements, W1 8,192
    inits = [numpy_helper.from_array(offset((384, 96), 1, 1), "Wm"),
             numpy_helper.from_array(np.array([16, 96], np.int64), "s2"),
             numpy_helper.from_array(offset((1024, 96), 2, 0), "Wg"),
             numpy_helper.from_array(builders.rand((1024,), 3), "C"),
             numpy_helper.from_array(np.array([1, 16, 32, 32], np.int64), "s4"),
             numpy_helper.from_array(offset((256, 16, 3, 3), 4, 0), "Wc"),
             numpy_helper.from_array(builders.rand((256,), 5), "B"),
             numpy_helper.from_array(offset((32, 256, 1, 1), 6, 0), "W1")]
    return builders.model(nodes, [builders.vi("x", shape=[2, 8, 384])], [builders.vi("y", shape=[1, 32, 16, 32])],
                          inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 17])  # ReduceSum's axes: an attribute before 13, an input from 13
def test_zero_points_follow_each_reader(tmp_path, opset):
    """--lowering scaled --asymmetric: each reader computes s * (X @ q - sum(X) * z). The saved
    model holds int8 weights and no DequantizeLinear, and computes what the original does at less
    than half the symmetric form's output error (a wrong term would be far off: the offsets make
    sum(X) * z most of each output)."""
    model = _offset_readers_model(opset)
    onnx.checker.check_model(model, full_check=True)
    feeds = builders.feeds_for(model)
    saved, out, report = _quant(tmp_path, model, lowering="scaled", symmetric=False, min_elements=2048)  # not C
    assert report.pass_report("quantize").details["schemes"] == {"int8/channel/asym/scaled": 4}
    ops = [n.op_type for n in saved.graph.node]
    # MatMul and Gemm sum X with ReduceSum; the Convs with Convs: channels, window (3x3 only), z
    assert ops.count("ReduceSum") == 2 and "DequantizeLinear" not in ops and ops.count("Conv") == 2 + 3 + 2
    assert sum(t.data_type == onnx.TensorProto.INT8 for t in saved.graph.initializer) == 4
    (tmp_path / "sym").mkdir()
    _, sym_out, _ = _quant(tmp_path / "sym", model, lowering="scaled", symmetric=True, min_elements=2048)
    err, sym_err = _rel(model, out, feeds), _rel(model, sym_out, feeds)
    assert err < 0.5 * sym_err
    assert report.verification["rel_l2_error"] == pytest.approx(err, rel=1e-3) and err < 0.02


def test_zero_points_of_one_weight_read_with_two_alphas(tmp_path):
    """One weight read by MatMul and by Gemm with alpha 0.5: each reader gets its own zero-point
    term (alpha scales Gemm's), and the scale constant they share is made once."""
    w = (builders.rand((64, 96), 1) * 0.05 + builders.rand((96,), 11)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("Gemm", ["x", "W"], ["b"], alpha=0.5),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[8, 64])], [builders.vi("y", shape=[8, 96])],
                           [numpy_helper.from_array(w, "W")])
    saved, out, report = _quant(tmp_path, model, lowering="scaled", symmetric=False)
    assert report.pass_report("quantize").details["schemes"] == {"int8/channel/asym/scaled": 1}
    names = [t.name for t in saved.graph.initializer]
    assert sum("zero_point" in n for n in names) == 2 and sum(n.startswith("W_scale") for n in names) == 1
    (tmp_path / "sym").mkdir()
    _, sym_out, _ = _quant(tmp_path / "sym", model, lowering="scaled", symmetric=True)
    feeds = builders.feeds_for(model)
    assert _rel(model, out, feeds) < 0.7 * _rel(model, sym_out, feeds)


def test_auto_gives_zero_points_to_matmul_weights_and_float16_to_small_ones(tmp_path):
    """auto: the offset MatMul and Gemm weights are more accurate with zero points in their layers'
    outputs, and get them; the int8 convolution too, in its weight (zero_points.CONV_ZERO_POINT_READERS,
    a form only: its lean-or-accurate rank stays the symmetric error's); the 1x1 Conv's weight
    (8,192 elements, below SMALL_WEIGHT_ELEMENTS, 4.5% of the int8 bytes) is stored as float16."""
    from onnxsurgery.quantization.choices.weights import SMALL_FLOAT16_SHARE, SMALL_WEIGHT_ELEMENTS

    model = _offset_readers_model(17)
    saved, out, report = _quant(tmp_path, model, min_elements=2048)
    q = report.pass_report("quantize").details
    assert q["lean_asymmetric"] == ["Wc", "Wg", "Wm"]
    assert 32 * 256 < SMALL_WEIGHT_ELEMENTS <= 256 * 16 * 9 and 32 * 256 <= SMALL_FLOAT16_SHARE * 180224
    assert q["float16_small"] == ["W1"] and q["accurate_lowering"] == [] and q["schemes"]["fp16/cast"] == 1
    assert "int8/channel/sym/scaled" not in q["schemes"]  # Wc has zero points too
    stored = {t.name: t for t in saved.graph.initializer}
    assert stored["W1_fp16"].data_type == onnx.TensorProto.FLOAT16 and "W1" not in stored
    (tmp_path / "sym").mkdir()
    _, _, symmetric = _quant(tmp_path / "sym", model, min_elements=2048, lowering="scaled")
    assert report.verification["rel_l2_error"] < symmetric.verification["rel_l2_error"]  # Wc's error dominates


def test_float16_for_small_weights_keeps_to_its_share(tmp_path, monkeypatch):
    """A model made only of small weights: float16 for the lossiest of them (the outlier one
    first) while their extra byte per element stays within SMALL_FLOAT16_SHARE of the int8
    bytes; the rest stay int8, so the file stays near the int8 size."""
    from onnxsurgery.quantization.choices import lean as lean_choice
    from onnxsurgery.quantization.choices.lean import SMALL_FLOAT16_SHARE

    nodes, inits, width = [], [], 64
    for i in range(20):  # 20 MatMuls of 64 x 64 = 4,096 elements
        w = builders.rand((width, width), i) * 0.1
        if i == 7:  # outliers scattered over rows and columns: every channel's scale is wasted
            w[np.arange(width), (np.arange(width) * 7) % width] *= 30.0
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        nodes.append(helper.make_node("MatMul", [f"h{i}", f"W{i}"], [f"h{i + 1}"]))
    model = builders.model(nodes, [builders.vi("h0", shape=[8, width])], [builders.vi("h20", shape=[8, width])],
                           inits)
    saved, out, report = _quant(tmp_path, model)
    q = report.pass_report("quantize").details
    allowed = int(SMALL_FLOAT16_SHARE * 20 * width * width) // (width * width)  # weights that fit: 1
    assert allowed == 1 and len(q["float16_small"]) == allowed and q["schemes"]["fp16/cast"] == allowed
    assert q["float16_small"] == ["W7"]
    assert sum(t.data_type == onnx.TensorProto.INT8 for t in saved.graph.initializer) == 19
    monkeypatch.setattr(lean_choice, "SMALL_FLOAT16_SHARE", 0.0)  # every weight int8
    (tmp_path / "int8").mkdir()
    _, _, all_int8 = _quant(tmp_path / "int8", model)
    int8_details = all_int8.pass_report("quantize").details
    assert int8_details["float16_small"] == [] and int8_details["largest_errors"][0]["name"] == "W7"
    assert report.verification["rel_l2_error"] < all_int8.verification["rel_l2_error"]


@pytest.mark.parametrize("dtype,symmetric", [("int8", False), ("int8", True), ("int4", False), ("int4", True),
                                             ("uint4", False)])
def test_matmul_nbits_dequantizes_like_the_weights(tmp_path, dtype, symmetric):
    """--target onnxruntime: y = I @ W through MatMulNBits gives the dequantized weight, within
    half a quantization step of W; the same integers as the DequantizeLinear lowering."""
    w = builders.rand((128, 48), 3) * 0.1
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[128, 128])],
                           [builders.vi("y", shape=[128, 48])], [numpy_helper.from_array(w, "W")])
    asked = {} if "4" in dtype else {"lowering": "matmulnbits"}  # int8: only when asked (rules.lowering_for)
    saved, out, report = _quant(tmp_path, model, dtype=dtype, symmetric=symmetric, target="onnxruntime", **asked)
    node = next(n for n in saved.graph.node if n.op_type == "MatMulNBits")
    assert node.domain == "com.microsoft"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["accuracy_level"] == 4 and attrs["bits"] == (4 if "4" in dtype else 8)
    eye = {"x": np.eye(128, dtype=np.float32)}
    got = run(builders.in_float_arithmetic(out), eye)[0]  # the stored integers, exactly
    _, dq_out, _ = _quant(tmp_path, model, dtype=dtype, symmetric=symmetric, keep_quantized=True,
                          granularity="block")
    from onnxsurgery.running.sessions import session

    via_dq = session(dq_out, runtime="onnxruntime-web").run(None, eye)[0]
    assert np.allclose(got, via_dq, rtol=0, atol=1e-6)
    levels = 15 if "4" in dtype else 255
    step = (np.abs(w).max() * 2) / levels
    assert np.abs(got - w).max() <= 0.51 * step * (2 if symmetric else 1)


def test_target_onnxruntime_keeps_8_bit_weights_off_matmul_nbits(tmp_path):
    """Outside a KV-cache decoder int8 takes the lean form (rules.decoder_nbits says why)."""
    w = builders.rand((128, 48), 3) * 0.1
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[1, 128])],
                           [builders.vi("y", shape=[1, 48])], [numpy_helper.from_array(w, "W")])
    saved, _, report = _quant(tmp_path, model, target="onnxruntime")
    assert "MatMulNBits" not in {n.op_type for n in saved.graph.node}
    (record,) = [r for r in report.weights if r["name"] == "W"]
    assert record["lowering"] == "scaled" and "not MatMulNBits" in record["why"]


def _kv_decoder_step() -> onnx.ModelProto:
    """A decoder's step in miniature: a MatMul weight and a KV cache input (past_key) whose
    present output the step appends to."""
    w = builders.rand((128, 48), 3) * 0.1
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]),
             helper.make_node("Concat", ["past_key", "y"], ["present_key"], axis=0)]
    return builders.model(nodes, [builders.vi("x", shape=[1, 128]), builders.vi("past_key", shape=["past", 48])],
                          [builders.vi("y", shape=[1, 48]), builders.vi("present_key", shape=["total", 48])],
                          [numpy_helper.from_array(w, "W")])


def test_a_kv_cache_decoder_for_onnxruntime_gets_8_bit_matmul_nbits(tmp_path):
    """rules.decoder_nbits: under --target onnxruntime a KV-cache decoder's int8 MatMul weight is
    8-bit MatMulNBits, symmetric blocks of 32 along K (no zero points), accuracy_level 4; the same
    model under the default target (standard ops: it may run in onnxruntime-web) keeps the lean form."""
    model = _kv_decoder_step()
    saved, out, report = _quant(tmp_path, model, target="onnxruntime")
    (record,) = [r for r in report.weights if r["name"] == "W"]
    assert (record["lowering"], record["dtype"], record["granularity"], record["block_size"], record["symmetric"]) \
        == ("matmulnbits", "int8", "block", 32, True)
    assert "KV-cache decoder" in record["why"]
    (node,) = [n for n in saved.graph.node if n.op_type == "MatMulNBits"]
    attrs = {a.name: a.i for a in node.attribute}
    assert (attrs["bits"], attrs["block_size"], attrs["accuracy_level"]) == (8, 32, 4) and len(node.input) == 3
    feeds = builders.feeds_for(model)
    (want, _), (got, _) = run(model, feeds), run(out, feeds)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.02 and report.verification["rel_l2_error"] < 0.02
    (tmp_path / "any").mkdir()
    saved_any, _, report_any = _quant(tmp_path / "any", model)
    assert "MatMulNBits" not in {n.op_type for n in saved_any.graph.node}
    assert [r["lowering"] for r in report_any.weights if r["name"] == "W"] == ["scaled"]


def test_a_kv_cache_decoder_for_onnxruntime_web_keeps_the_lean_form(tmp_path):
    """--runtime onnxruntime-web: its WASM 8-bit MatMulNBits is 7x slower than the lean form at one
    token (rules.decoder_nbits), so the plan keeps the lean form, in the dry run as in the file."""
    model = _kv_decoder_step()
    saved, _, report = _quant(tmp_path, model, target="onnxruntime", runtime="onnxruntime-web")
    assert "MatMulNBits" not in {n.op_type for n in saved.graph.node}
    assert [r["lowering"] for r in report.weights if r["name"] == "W"] == ["scaled"]
    args = ["quant", str(tmp_path / "in.onnx"), "--dry-run", "--json", "--min-elements", "1024",
            "--target", "onnxruntime"]
    lowerings = []
    for extra in ([], ["--runtime", "onnxruntime-web"]):
        r = CliRunner().invoke(main, args + extra)
        assert r.exit_code == 0, r.output
        lowerings += [w["lowering"] for w in json.loads(r.output)["weights"] if w["name"] == "W"]
    assert lowerings == ["matmulnbits", "scaled"]


def test_keep_quantized_keeps_dequantize_linear_and_upgrades(tmp_path):
    model = _readers_model()
    saved, out, report = _quant(tmp_path, model, keep_quantized=True)
    assert saved.opset_import[0].version == 21
    ops = [n.op_type for n in saved.graph.node]
    assert ops.count("DequantizeLinear") == 3 and "Cast" not in ops
    assert "upgraded opset 17 -> 21" in " ".join(report.notes)
    assert report.verification["rel_l2_error"] < 0.02
    assert "int8 activations" in report.verification["runtime"]
    web = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "w.onnx", min_elements=1024, keep_quantized=True,
                                 runtime="onnxruntime-web")
    assert "onnxruntime-web" in web.verification["runtime"]


def test_identity_in_front_of_shared_weights_is_bypassed(tmp_path):
    """ALBERT's exporter reads each shared weight through one Identity per layer."""
    w = builders.rand((64, 64), 1) * 0.1
    nodes = [helper.make_node("Identity", ["W"], ["w1"]), helper.make_node("Identity", ["W"], ["w2"]),
             helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 64])],
                           [numpy_helper.from_array(w, "W")])
    saved, out, report = _quant(tmp_path, model)
    assert "Identity" not in [n.op_type for n in saved.graph.node]
    ((scheme, count),) = report.pass_report("quantize").details["schemes"].items()
    assert count == 1 and scheme.startswith("int8/channel/") and scheme.endswith("/scaled")
    assert report.pass_report("bypass_identity").changed == 2
    assert report.verification["rel_l2_error"] < 0.01


@pytest.mark.parametrize("field,value", [("granularity", "row"), ("lowering", "fast"), ("dtype", "int9"),
                                         ("target", "tflite"), ("rounding", "up")])
def test_options_are_validated(field, value):
    with pytest.raises(ValueError, match=f"unknown {field} '{value}'; choose one of"):
        QuantOptions(**{field: value})


def test_lean_or_accurate_is_measured_on_what_the_layer_reads(tmp_path, monkeypatch):
    """One weight, two input profiles. Rows 0-31 are 40x larger: one scale per output channel
    is coarse for the other rows, fine for these. When only rows 0-31 meet non-zero inputs the
    lean form costs the layer's output nothing more than blocks (kept lean); when only the
    other rows do, it costs several times more (the accurate chain, budget permitting)."""
    from onnxsurgery.quantization.choices import lean as lean_choice, weights

    monkeypatch.setattr(lean_choice, "ACCURATE_MEMORY_SHARE", 4.0)  # room for the chain
    monkeypatch.setattr(weights, "SMALL_WEIGHT_ELEMENTS", 0)  # the measured ratio alone
    w = builders.rand((256, 64), 1) * 0.05
    w[:32] *= 40.0
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[4, 256])],
                           [builders.vi("y", shape=[4, 64])], [numpy_helper.from_array(w, "W")])
    x = builders.rand((4, 256), 2)
    chosen = {}
    for profile, rows in (("large rows", slice(32, None)), ("small rows", slice(None, 32))):
        fed = x.copy()
        fed[:, rows] = 0.0
        _, _, report = _quant(tmp_path, model, samples=[{"x": fed}])
        chosen[profile] = report.pass_report("quantize").details["accurate_lowering"]
    assert chosen == {"large rows": [], "small rows": ["W"]}


def _lstm_model(opset: int) -> onnx.ModelProto:
    """One LSTM (hidden 32, input 64) whose W and R are initializers, as ddddocr stores them."""
    hidden, inputs = 32, 64
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden)]
    inits = [numpy_helper.from_array(builders.rand((1, 4 * hidden, inputs), 1) * 0.2, "W"),
             numpy_helper.from_array(builders.rand((1, 4 * hidden, hidden), 2) * 0.2, "R"),
             numpy_helper.from_array(builders.rand((1, 8 * hidden), 3) * 0.1, "B")]
    return builders.model(nodes, [builders.vi("x", shape=[10, 1, inputs])],
                          [builders.vi("y", shape=[10, 1, 1, hidden])], inits, opset=opset)


def test_recurrent_weights_stay_int8_through_dequantize_linear(tmp_path):
    """No scale can follow an LSTM (its weights meet an internal state), and Cast -> Mul folds
    into two float copies at load: the default keeps W and R int8 behind per-channel
    DequantizeLinear, which onnxruntime does not fold, upgrading an opset-12 model to 13."""
    saved, out, report = _quant(tmp_path, _lstm_model(opset=12))
    assert saved.opset_import[0].version == 13
    assert "upgraded opset 12 -> 13" in " ".join(report.notes)
    dq = {n.output[0]: n for n in saved.graph.node if n.op_type == "DequantizeLinear"}
    lstm = next(n for n in saved.graph.node if n.op_type == "LSTM")
    assert lstm.input[1] in dq and lstm.input[2] in dq
    for name in (lstm.input[1], lstm.input[2]):
        node = dq[name]
        assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["axis"] == 1  # per gate row
        stored = next(i for i in saved.graph.initializer if i.name == node.input[0])
        assert stored.data_type == onnx.TensorProto.INT8
    # zero points measured in the weight, as for every lean DequantizeLinear (zero_points.zero_points_tried)
    assert report.pass_report("quantize").details["schemes"] == {"int8/channel/asym/dq": 2}
    assert report.verification["rel_l2_error"] < 0.01


def test_recurrent_weights_below_opset_13_in_a_graph_fall_back_to_cast_and_mul():
    """The gs-level pass does not upgrade: below opset 13 (no per-channel DequantizeLinear) the
    recurrent weights get Cast -> Mul, and the graph still computes the same LSTM."""
    model = _lstm_model(opset=12)
    graph = onnxsurgery.import_graph(model)
    report = onnxsurgery.quantize_weights(graph, min_elements=1024)
    assert report.details["schemes"] == {"int8/channel/sym/arith": 2}
    result = onnxsurgery.finish(graph)
    assert "DequantizeLinear" not in [n.op_type for n in result.graph.node]
    feeds = {"x": builders.rand((10, 1, 64), 9)}
    assert _rel(model, result, feeds) < 0.01


def test_a_large_weight_is_measured_on_evenly_spaced_whole_channels():
    """Measured in the weight, the lean-or-accurate ratio of a weight of 4M elements or more is
    taken on about 1M of them (choices.sampling.channel_sample): whole output channels, first and
    last included; smaller weights whole."""
    import onnx_graphsurgeon as gs

    from onnxsurgery.graph_utils import collect_constants
    from onnxsurgery.quantization.choices.sampling import SAMPLED_ELEMENTS, channel_sample

    def site_of(w):
        x, y = gs.Variable("x", np.float32, [1, w.shape[0]]), gs.Variable("y", np.float32, [1, w.shape[1]])
        graph = gs.Graph(nodes=[gs.Node("MatMul", inputs=[x, gs.Constant("W", w)], outputs=[y])],
                         inputs=[x], outputs=[y])
        return collect_constants(graph)[0]

    w = np.random.default_rng(0).standard_normal((1024, 4096)).astype(np.float32)
    sample = channel_sample(w, site_of(w))
    assert sample.shape == (1024, SAMPLED_ELEMENTS // 1024)  # MatMul B [K, N]: output channels are columns
    for column in (0, 4095):
        assert any(np.array_equal(sample[:, j], w[:, column]) for j in (0, -1))
    small = w[:, :2048]
    assert channel_sample(small, site_of(small)) is small


def test_float16_for_a_lossy_weight_whose_chain_does_not_fit_measured_on_inputs(tmp_path):
    """B loses far more per channel than in blocks (outlier blocks) and its accurate chain (12
    bytes an element at load) does not fit the budget once a plain 256x512 weight makes B a
    tenth of the weights: with --inputs, where the ratio is measured in B's layer output, B is
    stored as float16 instead (lean.LOSSY_FLOAT16_SHARE: B's 16,384 elements are within a tenth
    of all), and the output is closer to the float model's than with B in int8; without inputs
    (the ratio in the weight) B stays int8 (issue 49: silero-vad's encoder.1 convolution)."""
    model = builders.outlier_model()
    model.graph.initializer.append(numpy_helper.from_array(builders.rand((256, 512), 3) * 0.05, "Wide"))
    model.graph.node.append(helper.make_node("MatMul", ["x", "Wide"], ["w"]))
    model.graph.output.append(builders.vi("w", shape=[2, 512]))
    feeds = builders.feeds_for(model)
    samples = [builders.feeds_for(model, seed) for seed in range(3)]  # calibration.MIN_CHOICE_SAMPLES
    _, out, report = _quant(tmp_path, model, samples=samples)
    records = {w["name"]: w for w in report.weights}
    assert records["B"]["dtype"] == "float16" and records["B"]["why"].startswith("float16: int8 per channel loses")
    assert report.pass_report("quantize").details["float16_lossy"] == ["B"]
    assert {records[n]["dtype"] for n in ("A", "Wide")} == {"int8"}
    def error_in_y(path) -> float:  # the output B feeds
        (a, _), (b, _) = run(model, feeds), run(path, feeds)
        return float(np.linalg.norm(b - a) / np.linalg.norm(a))

    with_float16 = error_in_y(out)
    (tmp_path / "none").mkdir()
    _, out, report = _quant(tmp_path / "none", model)
    assert {w["name"]: w["dtype"] for w in report.weights}["B"] == "int8"
    assert with_float16 < error_in_y(out)
