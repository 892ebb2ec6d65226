"""Issue 49, item 2: `compare` takes a model written by `npy` (its arrays given as the
initializers they were, as `run` gives them), and an already quantized model's
DequantizeLinear keeps what onnxruntime's fusions need: its scale and zero point stay in the
graph, its weight comes back as an initializer (`run`, `compare`, `embed`)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from conftest import assert_same_outputs, builders, run
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.cli import main
from onnxsurgery.storage.npy import load_feeds


def _cli(*args, code=0):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def quantized(tmp_path, save):
    """builders.quant_cases (weights in the main graph and in an If branch) quantized behind
    DequantizeLinear, per channel: what onnxruntime fuses into MatMulNBits."""
    src, out = save(builders.quant_cases()), tmp_path / "q.onnx"
    _cli("quant", src, out, "--lowering", "dq", "--granularity", "channel", "--no-verify")
    assert "DequantizeLinear" in {n.op_type for n in onnx.load(str(out)).graph.node}
    return out


def test_compare_takes_an_npy_model_on_either_side(tmp_path, save):
    m = builders.if_and_loop_subgraphs()
    src, out = save(m), tmp_path / "n.onnx"
    _cli("npy", src, out, "--min-bytes", "1")
    r = _cli("compare", src, out)
    assert "identical outputs" in r.output and "given as initializers" in r.output
    data = json.loads(_cli("compare", out, src, "--json").output)
    assert data["exact"] and data["npy_arrays"] == {"reference": len(load_feeds(out))}
    # --inputs need not hold the arrays, whichever side has them
    np.savez(tmp_path / "in.npz", **builders.feeds_for(m, 1))
    for a, b in ((src, out), (out, src)):
        assert json.loads(_cli("compare", a, b, "--inputs", tmp_path / "in.npz", "--json").output)["exact"]
    # the API takes the path alike
    assert onnxsurgery.compare(src, out)["exact"]


def test_a_model_without_its_arrays_is_still_a_model_with_inputs(tmp_path, save):
    """Without its manifest, an npy model is what its graph says: inputs to feed."""
    m = builders.duplicate_initializers()
    src, out = save(m), tmp_path / "n.onnx"
    _cli("npy", src, out, "--min-bytes", "1")
    (tmp_path / "n.npy.json").unlink()
    r = _cli("compare", src, out, code=2)
    assert "missing" in r.output


def test_dequantize_linear_scales_stay_and_weights_come_back_as_initializers(tmp_path, quantized):
    out = tmp_path / "n.onnx"
    report = onnxsurgery.npy_file(quantized, out, min_bytes=1)
    moved = report.pass_report("externalize")
    reasons = {s.name: s.reason for s in moved.skipped}
    scales = [n for n in reasons if n.endswith(("_scale", "_zero_point", "_zp"))]
    assert scales and all("scale or zero point" in reasons[n] for n in scales)
    # the If branch's quantized weight stays: onnxruntime cannot load MatMulNBits on an outer weight
    assert any("inside" in r and "then_branch" in r for r in reasons.values())
    saved = onnx.load(str(out))
    dq_inputs = {i for n in saved.graph.node if n.op_type == "DequantizeLinear" for i in n.input[1:]}
    assert dq_inputs and dq_inputs <= {t.name for t in saved.graph.initializer}
    weights = {n.input[0] for n in saved.graph.node if n.op_type == "DequantizeLinear"}
    assert weights and weights <= set(load_feeds(out))  # the main graph's quantized weights moved
    original = onnx.load(str(quantized))
    for seed in (0, 1):  # both If branches
        feeds = builders.feeds_for(original, seed)
        assert [a.tobytes() for a in onnxsurgery.run_model(out, feeds).values()] == \
            [a.tobytes() for a in run(original, feeds)]
    r = _cli("compare", quantized, out)
    assert "identical outputs" in r.output
    onnxsurgery.embed_file(out, tmp_path / "back.onnx")
    assert_same_outputs(original, tmp_path / "back.onnx")


def test_a_large_quantized_weight_comes_back_exactly(tmp_path, save):
    """A 256x256 int8 weight (64 KB: handed to onnxruntime as an external initializer, not in
    the protobuf) behind DequantizeLinear -> MatMul: `run` and `compare` give the original's
    outputs bit for bit, MatMulNBits fusion included."""
    w = builders.rand((256, 256), 8) * 0.05
    scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    m = builders.model(
        [helper.make_node("DequantizeLinear", ["W_q", "W_scale", "W_zp"], ["W"], axis=1),
         helper.make_node("MatMul", ["x", "W"], ["y"])],
        [builders.vi("x", shape=[4, 256])], [builders.vi("y", shape=[4, 256])],
        [numpy_helper.from_array(q, "W_q"), numpy_helper.from_array(scale, "W_scale"),
         numpy_helper.from_array(np.zeros(256, np.int8), "W_zp")])
    src, out = save(m), tmp_path / "n.onnx"
    _cli("npy", src, out, "--min-bytes", "1")
    assert set(load_feeds(out)) == {"W_q"}
    for seed in (0, 1):
        feeds = builders.feeds_for(m, seed)
        assert onnxsurgery.run_model(out, feeds)["y"].tobytes() == run(m, feeds)[0].tobytes()
    assert json.loads(_cli("compare", src, out, "--json").output)["exact"]


def test_npy_by_default_leaves_a_qdq_models_shared_scales_in_place(tmp_path, save):
    """Static quantization shares one activation scale and zero point among every Q/DQ pair:
    read more than once, `npy` selected them by default and they went in as inputs, which
    onnxruntime fuses no pattern with. Now they stay, with a reason each."""
    m = builders.qdq_static()
    src, out = save(m), tmp_path / "n.onnx"
    data = json.loads(_cli("npy", src, out, "--shared", "--json").output)  # the old default: read more than once
    moved = next(p for p in data["passes"] if p["name"] == "externalize")
    assert moved["changed"] == 0
    assert {s["name"] for s in moved["skipped"]} == {"s_a", "z_a", "s_w", "z_w"}
    assert all("scale or zero point" in s["reason"] for s in moved["skipped"])
    assert json.loads(_cli("compare", src, out, "--json").output)["exact"]
