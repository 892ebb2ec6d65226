"""A Gemm weight read with transB=1 (a classifier head, torch's Linear) in blocks is stored
transposed, [K, N] with blocks along axis 0, and its Gemms get transB=0: onnxruntime fuses
DequantizeLinear only into a Gemm without transB (quantization/lowerings/dq_transposed.py). Under
--dtype int4 such a weight is int8 blocks in that form, and a bias stays float16
(quantization/choices/int4_paths.py)."""

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
from onnxsurgery.running.verify import runtime_label

N, K = 96, 64
# a lone Gemm head stays int8 under int4: the plan-level rule (int4_saving.py) would keep the int8 default's
pytestmark = pytest.mark.usefixtures("int4_forms_alone")


def gemms(shared: bool) -> onnx.ModelProto:
    """y = x @ W.T + B; with `shared`, a second Gemm reads W (transB=1) too."""
    w, b = builders.rand((N, K), 1) * 0.1, builders.rand((N,), 2) * 0.1
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)]
    outputs = [builders.vi("y", shape=[4, N])]
    if shared:
        nodes.append(helper.make_node("Gemm", ["x", "W"], ["y2"], transB=1, alpha=0.5))
        outputs.append(builders.vi("y2", shape=[4, N]))
    return builders.model(nodes, [builders.vi("x", shape=[4, K])], outputs,
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])


def _quant(tmp_path, model, *args):
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    selection = [] if "--plan" in args else ["--min-elements", "100"]  # a plan decides every weight
    r = CliRunner().invoke(main, ["-q", "quant", str(src), str(out), *selection, *args])
    assert r.exit_code == 0, r.output
    return src, out


def _dequantized(model: onnx.ModelProto, dq: onnx.NodeProto) -> np.ndarray:
    """What the DequantizeLinear computes, from its stored integers, in numpy."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    q, scale = inits[dq.input[0]].astype(np.float32), inits[dq.input[1]]
    zero = inits[dq.input[2]].astype(np.float32) if len(dq.input) > 2 else np.zeros_like(scale)
    attrs = {a.name: helper.get_attribute_value(a) for a in dq.attribute}
    axis, block = attrs["axis"], attrs["block_size"]
    return (q - np.repeat(zero, block, axis=axis)) * np.repeat(scale, block, axis=axis)


def _plan_with(tmp_path, model, lowering: str) -> str:
    """--plan: the default int4 plan with W's record asking for `lowering`."""
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    r = CliRunner().invoke(main, ["-q", "quant", str(src), "--dtype", "int4", "--keep-quantized",
                                  "--min-elements", "100", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    for record in plan["weights"]:
        if record["name"] == "W":
            record.update(dtype="int8", granularity="block", block_size=32, axis=1, lowering=lowering)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return str(path)


@pytest.mark.parametrize("args, shared", [
    (["--dtype", "int4"], False),  # the default's int4 picks it for a single transB Gemm
    (["--plan", "PLAN"], True),  # a plan asks for it: a weight read by two Gemms
])
def test_the_weight_is_stored_transposed_and_computes_what_its_integers_say(tmp_path, args, shared):
    model = gemms(shared)
    args = [_plan_with(tmp_path, model, "dq_transposed") if a == "PLAN" else a for a in args]
    src, out = _quant(tmp_path, model, *args)
    model = onnx.load(str(out))
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and
              any(r.op_type == "Gemm" and r.input[1] == n.output[0] for r in model.graph.node))
    readers = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert len(readers) == (2 if shared else 1)
    assert all(n.input[1] == dq.output[0] and {a.name: a.i for a in n.attribute}.get("transB", 0) == 0
               for n in readers)
    w_kn = _dequantized(model, dq)
    assert w_kn.shape == (K, N)
    # unoptimized, onnxruntime computes exactly the stored integers' weight, in the [K, N] layout
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    feeds = builders.feeds_for(onnx.load(str(src)), 0)
    got = ort.InferenceSession(str(out), plain, providers=["CPUExecutionProvider"]).run(None, feeds)
    bias = numpy_helper.to_array(onnx.load(str(src)).graph.initializer[1])
    np.testing.assert_allclose(got[0], feeds["x"] @ w_kn + bias, rtol=1e-3, atol=1e-3)  # bias: float16
    if shared:
        np.testing.assert_allclose(got[1], 0.5 * feeds["x"] @ w_kn, rtol=1e-4, atol=1e-4)


def test_keep_quantized_keeps_the_layout_it_had(tmp_path):
    """--keep-quantized puts memory first: the fused kernel packs a copy of the integers
    (ddddocr: 0.44x memory against 0.31x), so the weight keeps [N, K] and its Gemm transB."""
    _, out = _quant(tmp_path, gemms(False), "--keep-quantized")
    model = onnx.load(str(out))
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    assert {a.name: a.i for a in gemm.attribute}["transB"] == 1
    assert "fused" not in runtime_label("onnxruntime", out)


def test_onnxruntime_fuses_the_single_reader_into_matmulnbits(tmp_path):
    """What the transposition is for: in onnxruntime's optimized graph no DequantizeLinear is
    left (it would run at every inference), and the output stays close to the float model's."""
    src, out = _quant(tmp_path, gemms(False), "--dtype", "int4")
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    feeds = builders.feeds_for(onnx.load(str(src)), 0)
    got = ort.InferenceSession(str(out), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ops = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert "MatMulNBits" in ops and "DequantizeLinear" not in ops, ops
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.02


def test_int4_keeps_a_bias_in_float16(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(gemms(False), str(src))
    r = CliRunner().invoke(main, ["-q", "quant", str(src), "--dtype", "int4", "--min-elements", "16",
                                  "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    plan = {w["name"]: w for w in json.loads(r.output)["weights"]}
    assert (plan["B"]["dtype"], plan["B"]["lowering"]) == ("float16", "cast")
    assert "a bias" in plan["B"]["why"]
    assert (plan["W"]["dtype"], plan["W"]["granularity"], plan["W"]["lowering"]) == ("int8", "block", "dq_transposed")


def test_the_int8_default_keeps_it_in_float_activations_and_its_opset(tmp_path):
    """The default int8 no longer stores the classifier-like weight transposed for MatMulNBits
    (whose int8 activations cost accuracy, issue 55): where the memory rule keeps it quantized
    it is DequantizeLinear per channel before the Gemm with transB, which onnxruntime leaves
    unfused (float activations); the opset stays 17 and the output is close to the float one."""
    src, out = _quant(tmp_path, gemms(False))
    model = onnx.load(str(out))
    assert {o.domain: o.version for o in model.opset_import}[""] == 17
    assert {a.name: a.i for a in next(n for n in model.graph.node if n.op_type == "Gemm").attribute}["transB"] == 1
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    feeds = builders.feeds_for(onnx.load(str(src)), 0)
    got = ort.InferenceSession(str(out), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert "MatMulNBits" not in [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.02
    r = CliRunner().invoke(main, ["-q", "quant", str(src), "--min-elements", "100", "--dry-run", "--json"])
    record = next(w for w in json.loads(r.output)["weights"] if w["name"] == "W")
    assert record["lowering"] in ("dq", "scaled") and record["granularity"] == "channel", record
    assert "int8 activations" not in record["why"] or "not fused" in record["why"], record["why"]


def test_the_int8_default_leaves_a_gemm_it_cannot_fuse_lean_at_its_opset(tmp_path):
    """K = 120: no power-of-two block tiles it, so no fusion: the lean form, opset kept."""
    w = builders.rand((N, 120), 1) * 0.1
    model = builders.model([helper.make_node("Gemm", ["x", "W"], ["y"], transB=1)],
                           [builders.vi("x", shape=[4, 120])], [builders.vi("y", shape=[4, N])],
                           [numpy_helper.from_array(w, "W")])
    _, out = _quant(tmp_path, model)
    quantized = onnx.load(str(out))
    assert {o.domain: o.version for o in quantized.opset_import}[""] == 17
    assert "DequantizeLinear" not in [n.op_type for n in quantized.graph.node]


@pytest.mark.parametrize("n, lowering, opset", [(96, "dq", 17), (1040, "dq_transposed", 21)])
def test_a_small_transb_gemm_is_kept_in_float_activations_and_a_large_one_fused(tmp_path, n, lowering, opset):
    """A transB weight up to load_memory.UNFUSED_GEMM_ELEMENTS is lean, and kept quantized in
    memory (its lean form alone holds more than the float weight) as DequantizeLinear per channel
    before its Gemm (float activations); a larger one, which that would cost more than the Gemm
    at each inference, is stored transposed in blocks and fused into MatMulNBits at opset 21."""
    k = 1024
    model = builders.model([helper.make_node("Gemm", ["x", "W"], ["y"], transB=1)],
                           [builders.vi("x", shape=[2, k])], [builders.vi("y", shape=[2, n])],
                           [numpy_helper.from_array(builders.rand((n, k), 3) * 0.05, "W")])
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    r = CliRunner().invoke(main, ["-q", "quant", str(src), "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    record = next(w for w in plan["weights"] if w["name"] == "W")
    assert record["lowering"] == lowering and record["why"].startswith("kept quantized in memory"), record
    assert plan["opset"] == opset
