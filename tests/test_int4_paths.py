"""--dtype int4 picks each weight's form by whether onnxruntime runs its reader fast at 4 bits
(quant/choices/int4_paths.py): 4-bit where it fuses DequantizeLinear into MatMulNBits, int8
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
                        ("W_gemm_t", "Gemm with transB"), ("W_conv_small", "no 4-bit Conv")):
        record = plan[name]
        assert (record["dtype"], record["granularity"], record["lowering"]) == ("int8", "channel", "scaled"), name
        assert words in record["why"] and "not 4-bit" in record["why"], (name, record["why"])
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
    graph the weights left 4-bit for MatMul and Gemm became MatMulNBits; the DequantizeLinear
    nodes left feed the large convolution and the LSTM."""
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
    assert ops.count("MatMulNBits") == 3  # W_mm, W_k48, W_gemm
    readers = {i: n.op_type for n in optimized.graph.node for i in n.input}
    dq_readers = [readers.get(n.output[0]) for n in optimized.graph.node if n.op_type == "DequantizeLinear"]
    assert sorted(dq_readers) == ["Conv", "LSTM", "LSTM"]


def test_convolutions_holding_little_of_the_model_are_all_int8(tmp_path):
    """A large Conv weight stays 4-bit where convolutions are most of the model (above), and
    goes int8 where they hold at most int4_paths.CONV_SHARE of the weights' bytes."""
    from onnxsurgery.quant.choices.int4_paths import CONV_SHARE

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
