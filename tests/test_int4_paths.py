"""--dtype int4 picks each weight's form by whether onnxruntime runs its reader fast at 4 bits
(quantization/choices/int4_paths.py): 4-bit where it fuses DequantizeLinear into MatMulNBits, int8
where the reader has no fast 4-bit path, each record saying why."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import builders
from onnxsurgery.cli import main

HIDDEN = 32  # LSTM hidden size: W is [1, 128, 64]


def mixed_readers() -> onnx.ModelProto:
    """One weight per case: a MatMul weight (one reader, K = 128), one with K = 48 (blocks of
    16, a power of two, rather than 24), one with K = 120 (no power-of-two block tiles it), one
    read by two MatMuls, a Gemm weight without and one with transB, a small and a large Conv
    weight, and an LSTM's W and R."""
    w = {
        "W_mm": builders.rand((128, 64), 1), "W_k120": builders.rand((120, 64), 2),
        "W_k48": builders.rand((48, 128), 9), "W_gemm": builders.rand((64, 64), 10),
        "W_shared": builders.rand((64, 64), 3), "W_gemm_t": builders.rand((64, 64), 4),
        "W_conv_small": builders.rand((32, 16, 3, 3), 5), "W_conv_large": builders.rand((128, 64, 3, 3), 6),
        "W_lstm": builders.rand((1, 4 * HIDDEN, 64), 7), "R_lstm": builders.rand((1, 4 * HIDDEN, HIDDEN), 8),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W_mm"], ["h1"]),  # [4, 64]
        helper.make_node("MatMul", ["x120", "W_k120"], ["h2"]),
        helper.make_node("MatMul", ["h1", "W_shared"], ["h3"]),
        helper.make_node("MatMul", ["h2", "W_shared"], ["h4"]),
        helper.make_node("Gemm", ["h3", "W_gemm_t"], ["h5"], transB=1),
        helper.make_node("Gemm", ["h5", "W_gemm"], ["h6"]),
        helper.make_node("Add", ["h4", "h6"], ["y"]),
        helper.make_node("MatMul", ["x48", "W_k48"], ["z"]),
        helper.make_node("Conv", ["img", "W_conv_small"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c16", "W_conv_large"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("LSTM", ["seq", "W_lstm", "R_lstm"], ["", "lstm_h"], hidden_size=HIDDEN),
    ]
    inputs = [builders.vi("x", shape=[4, 128]), builders.vi("x120", shape=[4, 120]), builders.vi("x48", shape=[4, 48]),
              builders.vi("img", shape=[1, 16, 8, 8]), builders.vi("c16", shape=[1, 64, 4, 4]),
              builders.vi("seq", shape=[5, 1, 64])]
    outputs = [builders.vi("y", shape=[4, 64]), builders.vi("z", shape=[4, 128]),
               builders.vi("c1", shape=[1, 32, 8, 8]), builders.vi("c2", shape=[1, 128, 4, 4]),
               builders.vi("lstm_h", shape=[1, 1, HIDDEN])]
    return builders.model(nodes, inputs, outputs,
                          [numpy_helper.from_array(v * 0.1, k) for k, v in w.items()])


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "in.onnx"
    onnx.save(mixed_readers(), str(path))
    return path


def _plan(path, *args) -> dict[str, dict]:
    r = CliRunner().invoke(main, ["-q", "quant", str(path), "--dry-run", "--json", *args])
    assert r.exit_code == 0, r.output
    return {w["name"]: w for w in json.loads(r.output)["weights"]}


def test_each_weight_gets_the_form_its_reader_runs_fast_with_the_reason(model_path):
    plan = _plan(model_path, "--dtype", "int4")
    assert (plan["W_mm"]["dtype"], plan["W_mm"]["lowering"], plan["W_mm"]["block_size"]) == ("int4", "dq", 32)
    assert (plan["W_k48"]["dtype"], plan["W_k48"]["block_size"]) == ("int4", 16)
    assert (plan["W_gemm"]["dtype"], plan["W_gemm"]["lowering"]) == ("int4", "dq")
    for name, words in (("W_k120", "K = 120"), ("W_shared", "read by 2 MatMul nodes"),
                        ("W_conv_small", "no 4-bit Conv")):
        record = plan[name]
        assert (record["dtype"], record["granularity"], record["lowering"]) == ("int8", "channel", "scaled"), name
        assert words in record["why"] and "not 4-bit" in record["why"], (name, record["why"])
    # a classifier-like Gemm with transB: int8 blocks, stored transposed for the fusion (test below)
    gemm_t = plan["W_gemm_t"]
    assert (gemm_t["dtype"], gemm_t["granularity"], gemm_t["lowering"]) == ("int8", "block", "dq_transposed")
    assert "stored transposed" in gemm_t["why"] and "not 4-bit" in gemm_t["why"]
    large = plan["W_conv_large"]
    assert (large["dtype"], large["lowering"]) == ("int4", "dq")
    assert "dequantized at every inference" in large["why"] and "73728 elements" in large["why"]
    for name in ("W_lstm", "R_lstm"):
        record = plan[name]
        assert (record["dtype"], record["granularity"], record["lowering"]) == ("int8", "channel", "dq"), name
        assert "LSTM has no quantized kernel" in record["why"]


def test_uint4_falls_back_to_uint8(model_path):
    plan = _plan(model_path, "--dtype", "uint4")
    assert plan["W_mm"]["dtype"] == "uint4"
    assert plan["W_conv_small"]["dtype"] == plan["W_lstm"]["dtype"] == "uint8"


@pytest.mark.parametrize("asked", [["--keep-quantized"], ["--granularity", "block"], ["--lowering", "dq"]])
def test_forms_asked_for_are_kept(model_path, asked):
    """--keep-quantized puts memory first; an explicit grouping or lowering is the user's."""
    plan = _plan(model_path, "--dtype", "int4", *asked)
    changed = [w for w in plan.values() if w["dtype"] != "float"]
    assert changed and all(w["dtype"] in ("int4", "float16") for w in changed), \
        {w["name"]: w["dtype"] for w in changed}
    assert not any("not 4-bit" in w["why"] for w in changed)


def test_the_int8_default_is_untouched(model_path):
    plan = _plan(model_path)
    assert all(w["dtype"] in ("int8", "float", "float16") for w in plan.values())
    assert not any("not 4-bit" in w["why"] for w in plan.values())


def test_the_file_runs_and_onnxruntime_fuses_only_the_fast_weight(tmp_path, model_path):
    """The saved file: close to the float model in onnxruntime, and in onnxruntime's optimized
    graph the weights left 4-bit for MatMul and Gemm, and the int8 blocks of the Gemm with
    transB (stored transposed), became MatMulNBits; the DequantizeLinear nodes left feed the
    large convolution and the LSTM."""
    out = tmp_path / "q.onnx"
    r = CliRunner().invoke(main, ["-q", "quant", str(model_path), str(out), "--dtype", "int4", "--no-verify"])
    assert r.exit_code == 0, r.output
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    quantized = ort.InferenceSession(str(out), opts, providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feeds = builders.feeds_for(onnx.load(str(model_path)), 0)
    for a, b in zip(original.run(None, feeds), quantized.run(None, feeds)):
        assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.2  # 4-bit and int8 weights, 0.1-scaled normals
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    ops = [n.op_type for n in optimized.graph.node]
    assert ops.count("MatMulNBits") == 4  # W_mm, W_k48, W_gemm, W_gemm_t
    readers = {i: n.op_type for n in optimized.graph.node for i in n.input}
    dq_readers = [readers.get(n.output[0]) for n in optimized.graph.node if n.op_type == "DequantizeLinear"]
    assert sorted(dq_readers) == ["Conv", "LSTM", "LSTM"]


def test_convolutions_holding_little_of_the_model_are_all_int8(tmp_path):
    """A large Conv weight stays 4-bit where convolutions are most of the model (above), and
    goes int8 where they hold at most int4_paths.CONV_SHARE of the weights' bytes."""
    from onnxsurgery.quantization.choices.int4_paths import CONV_SHARE

    conv, matmul = builders.rand((128, 64, 3, 3), 1) * 0.1, builders.rand((1024, 1024), 2) * 0.1
    nodes = [helper.make_node("Conv", ["img", "W_conv_large"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["x", "W_big"], ["y"])]
    m = builders.model(nodes, [builders.vi("img", shape=[1, 64, 4, 4]), builders.vi("x", shape=[2, 1024])],
                       [builders.vi("c", shape=[1, 128, 4, 4]), builders.vi("y", shape=[2, 1024])],
                       [numpy_helper.from_array(conv, "W_conv_large"), numpy_helper.from_array(matmul, "W_big")])
    assert conv.size / (conv.size + matmul.size) <= CONV_SHARE
    path = tmp_path / "in.onnx"
    onnx.save(m, str(path))
    plan = _plan(path, "--dtype", "int4")
    assert (plan["W_conv_large"]["dtype"], plan["W_conv_large"]["lowering"]) == ("int8", "scaled")
    assert "convolutions hold 7%" in plan["W_conv_large"]["why"]
    assert plan["W_big"]["dtype"] == "int4"


def test_shared_weights_stay_4_bit_under_target_onnxruntime(model_path):
    """A weight read by several MatMuls is int8 under the default target (no standard-op form
    is both 4-bit and fast), and its why names the way out; --target onnxruntime keeps it 4-bit
    as one MatMulNBits per reader."""
    default = _plan(model_path, "--dtype", "int4")["W_shared"]
    assert default["dtype"] == "int8" and "--target onnxruntime keeps it 4-bit" in default["why"]
    ort_plan = _plan(model_path, "--dtype", "int4", "--target", "onnxruntime")
    shared = ort_plan["W_shared"]
    assert (shared["dtype"], shared["lowering"]) == ("int4", "matmulnbits")
    assert "one per reader over one packed weight (2 readers)" in shared["why"]
    assert ort_plan["W_k120"]["dtype"] == "int8"  # no power-of-two block tiles K = 120: no MatMulNBits
    gemm_t = ort_plan["W_gemm_t"]  # a Gemm with transB, most often a classifier head: int8 (int4_paths)
    assert gemm_t["dtype"] == "int8" and "Gemm with transB" in gemm_t["why"]


def test_a_model_onnxruntime_alone_runs_gets_matmul_nbits_under_the_default_target(tmp_path):
    """With a com.microsoft op already in the model (a genai builder export), only onnxruntime
    runs it: 4-bit MatMul weights are written as MatMulNBits, as --target onnxruntime writes them,
    instead of a DequantizeLinear onnxruntime fuses at load (int4_paths.runs_matmulnbits). The
    file runs in onnxruntime and stays close to the float model."""
    model = mixed_readers()
    (last,) = [n for n in model.graph.node if n.output[0] == "z"]
    last.output[0] = "z0"
    model.graph.node.append(helper.make_node("Gelu", ["z0"], ["z"], domain="com.microsoft"))
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    path, out = tmp_path / "ms.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(path))
    plan = _plan(path, "--dtype", "int4")
    for name in ("W_mm", "W_k48", "W_gemm", "W_shared"):
        assert (plan[name]["dtype"], plan[name]["lowering"]) == ("int4", "matmulnbits"), name
        assert "the model already has com.microsoft ops" in plan[name]["why"]
    assert plan["W_k120"]["dtype"] == "int8"  # no power-of-two block: no MatMulNBits either way
    assert _plan(path, "--dtype", "int4", "--lowering", "dq")["W_mm"]["lowering"] == "dq"  # asked for
    r = CliRunner().invoke(main, ["-q", "quant", str(path), str(out), "--dtype", "int4", "--no-verify"])
    assert r.exit_code == 0, r.output
    saved = onnx.load(str(out))
    nbits = [n for n in saved.graph.node if n.op_type == "MatMulNBits"]
    assert len(nbits) == 5  # W_mm, W_k48, W_gemm (no transB), and W_shared's two readers over one weight
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    quantized = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feeds = builders.feeds_for(model, 0)
    for a, b in zip(original.run(None, feeds), quantized.run(None, feeds)):
        assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.2


def shared_in_branches() -> onnx.ModelProto:
    """W [64, 64], read by a main-graph MatMul and by a MatMul in each branch of an If (the
    shape of a merged decoder's weights): x [3, 64] -> MatMul W2 [64, 64] -> If -> y."""
    w = builders.rand((64, 64), 11) * 0.1
    then_g = helper.make_graph([helper.make_node("MatMul", ["h", "W"], ["t"])], "then", [],
                               [builders.vi("t", shape=[3, 64])])
    else_g = helper.make_graph([helper.make_node("MatMul", ["h", "W"], ["e0"]),
                                helper.make_node("Relu", ["e0"], ["e"])], "else", [], [builders.vi("e", shape=[3, 64])])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return builders.model(nodes, [builders.vi("c", onnx.TensorProto.BOOL, []), builders.vi("x", shape=[3, 64])],
                          [builders.vi("y", shape=[3, 64])], [numpy_helper.from_array(w, "W")])


def _dequantized_nbits(graph: onnx.GraphProto, k: int, n: int, block: int) -> np.ndarray:
    """The [K, N] weight a MatMulNBits computes with: B's nibbles (low first) less the zero
    points (8 when absent), times the scales (lowerings/matmulnbits.py's layout)."""
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    b = next(v for name, v in init.items() if name.endswith("_nbits"))
    scales = next(v for name, v in init.items() if name.endswith("_scales")).reshape(n, k // block)
    q = np.stack([b & 15, b >> 4], axis=-1).reshape(n, k // block, block).astype(np.float32)
    zps = [v for name, v in init.items() if name.endswith("_zero_points")]
    if zps:
        packed = zps[0].reshape(n, -1)
        zero = np.stack([packed & 15, packed >> 4], axis=-1).reshape(n, -1)[:, :k // block].astype(np.float32)
    else:
        zero = np.full((n, k // block), 8.0, np.float32)
    return ((q - zero[..., None]) * scales[..., None]).reshape(n, k).T


def test_one_packed_weight_serves_readers_in_every_scope(tmp_path):
    """The saved file: the weight is stored once, in the main graph, every MatMul (main graph
    and both branches) became a MatMulNBits over it (accuracy_level 4), and onnxruntime, in float
    arithmetic, computes exactly what the stored 4-bit weight gives in numpy, on both branches."""
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(shared_in_branches(), str(src))
    r = CliRunner().invoke(main, ["-q", "quant", str(src), str(out), "--dtype", "int4", "--target", "onnxruntime",
                                  "--min-elements", "1024"])
    assert r.exit_code == 0, r.output
    m = onnx.load(str(out))
    branches = [a.g for node in m.graph.node if node.op_type == "If" for a in node.attribute]
    ops = [n.op_type for g in [m.graph, *branches] for n in g.node]
    assert ops.count("MatMulNBits") == 3 and "MatMul" not in ops
    stored = [t.name for g in [m.graph, *branches] for t in g.initializer]
    assert sum(name.endswith("_nbits") for name in stored) == 1
    assert all(not g.initializer for g in branches)
    assert {a.i for n in builders.matmul_nbits_nodes(m) for a in n.attribute if a.name == "accuracy_level"} == {4}
    w = _dequantized_nbits(m.graph, 64, 64, 32)
    x = builders.rand((3, 64), 12)
    session = ort.InferenceSession(builders.in_float_arithmetic(m).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    h = x @ w
    for cond, expected in ((True, h @ w), (False, np.maximum(h @ w, 0))):
        y, = session.run(None, {"c": np.array(cond), "x": x})
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias_shape", [None, (48,), (1, 48)])
def test_a_gemm_with_trans_b_and_bias_becomes_matmul_nbits(tmp_path, bias_shape):
    """Gemm(x, W[N, K], C; transB=1) under --target onnxruntime --dtype int4: one MatMulNBits
    with C as its bias, computing x @ W^T + C with the stored 4-bit weight."""
    w, c = builders.rand((48, 64), 13) * 0.1, builders.rand(bias_shape or (48,), 14)
    inputs, inits = ["x", "W"], [numpy_helper.from_array(w, "W")]
    if bias_shape:
        inputs.append("C")
        inits.append(numpy_helper.from_array(c, "C"))
    m = builders.model([helper.make_node("Gemm", inputs, ["y"], transB=1)], [builders.vi("x", shape=[3, 64])],
                       [builders.vi("y", shape=[3, 48])], inits)
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(m, str(src))
    plan = tmp_path / "plan.json"  # int4_paths keeps a Gemm int8: a plan asks for MatMulNBits
    plan.write_text(json.dumps({"weights": [{"name": "W", "dtype": "int4", "granularity": "block", "block_size": 32,
                                             "symmetric": False, "lowering": "matmulnbits"}]}))
    r = CliRunner().invoke(main, ["-q", "quant", str(src), str(out), "--plan", str(plan), "--target", "onnxruntime"])
    assert r.exit_code == 0, r.output
    q = onnx.load(str(out))
    assert [n.op_type for n in q.graph.node] == ["MatMulNBits"]
    x = builders.rand((3, 64), 15)
    expected = x @ _dequantized_nbits(q.graph, 64, 48, 32) + (c.reshape(-1) if bias_shape else 0)
    y, = ort.InferenceSession(builders.in_float_arithmetic(q).SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
