"""Calibration reaches values inside a main-graph If's branches (a merged decoder's layers):
each sample runs through a copy of the model whose If is replaced by the branch that sample
takes, and a weight's H sums the inputs it met in whichever branch ran. A reader in a Loop body
is still skipped, with a word."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.graph_names import make_names_unique
from onnxsurgery.graph_utils import collect_constants
from onnxsurgery.quantization.calibration import Calibration

ROWS, K = 4, 64


def _branches_model(computed_condition: bool) -> onnx.ModelProto:
    """x -> MatMul(W0) -> h -> If(c) { then: MatMul(Relu(h), W) ; else: MatMul(Sigmoid(h), W) } -> y.
    The branch-local Relu/Sigmoid outputs are what W multiplies. With `computed_condition`, the
    If reads Not(c) instead of the input itself."""
    out = lambda name: builders.vi(name, shape=[ROWS, K])  # noqa: E731
    # optimum names a branch's values alike in both branches; the same here
    then_g = helper.make_graph([helper.make_node("Relu", ["h"], ["act"]),
                                helper.make_node("MatMul", ["act", "W"], ["t"])], "then", [], [out("t")])
    else_g = helper.make_graph([helper.make_node("Sigmoid", ["h"], ["act"]),
                                helper.make_node("MatMul", ["act", "W"], ["e"])], "else", [], [out("e")])
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h"])]
    cond = "c"
    if computed_condition:
        nodes.append(helper.make_node("Not", ["c"], ["not_c"]))
        cond = "not_c"
    nodes.append(helper.make_node("If", [cond], ["y"], then_branch=then_g, else_branch=else_g))
    inits = [numpy_helper.from_array(builders.rand((K, K), 1) * 0.1, "W0"),
             numpy_helper.from_array(builders.rand((K, K), 2) * 0.1, "W")]
    return builders.model(nodes, [builders.vi("x", shape=[ROWS, K]), builders.vi("c", TensorProto.BOOL, [])],
                          [out("y")], inits)


def _samples(conds):
    return [{"x": builders.rand((ROWS, K), 10 + i), "c": np.array(c)} for i, c in enumerate(conds)]


@pytest.mark.parametrize("computed_condition", [False, True])
def test_a_weight_read_in_both_branches_meets_the_branch_each_sample_took(tmp_path, computed_condition):
    src = tmp_path / "in.onnx"
    model = _branches_model(computed_condition)
    onnx.save(model, str(src))
    samples = _samples([True, False, True, True, False, False])
    calibration = Calibration(src, samples)
    graph = gs.import_onnx(model)
    assert make_names_unique(graph)  # as quant's workspace does: the else branch's "act" is renamed
    sites = [s for s in collect_constants(graph) if s.name in ("W", "W0")]
    calibration.plan(sites)
    assert calibration.skipped == {}
    w0 = numpy_helper.to_array(model.graph.initializer[0])
    expected = np.zeros((K, K))
    for sample in samples:
        h = sample["x"] @ w0
        took_then = bool(sample["c"]) != computed_condition
        act = np.maximum(h, 0) if took_then else 1 / (1 + np.exp(-h))
        expected += act.T.astype(np.float64) @ act
    moments = calibration.moments(next(s for s in sites if s.name == "W"))
    np.testing.assert_allclose(moments.total, expected, rtol=1e-4, atol=1e-5)


def test_gptq_on_branch_weights_gives_a_valid_model(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_branches_model(False), str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024, dtype="int4",
                                    calibration=_samples([True, False] * 4), samples=_samples([True, False]))
    onnx.checker.check_model(onnx.load(str(tmp_path / "q.onnx")))
    q = report.pass_report("quantize").details
    assert "W" in q["calibrated"] or "GPTQ" in q["not_calibrated"]["W"]  # reached; kept or not on held-out
    assert report.verification["samples"] == 2


def _loop_model() -> onnx.ModelProto:
    """x -> Loop(2 iterations) { v = MatMul(v, W) } -> y: W is read inside a Loop body."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("MatMul", ["v_in", "W"], ["v_out"])],
        "body", [builders.vi("i", TensorProto.INT64, []), builders.vi("cond_in", TensorProto.BOOL, []),
                 builders.vi("v_in", shape=[ROWS, K])],
        [builders.vi("cond_out", TensorProto.BOOL, []), builders.vi("v_out", shape=[ROWS, K])])
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)]
    inits = [numpy_helper.from_array(builders.rand((K, K), 2) * 0.1, "W"), numpy_helper.from_array(np.array(2), "n")]
    return builders.model(nodes, [builders.vi("x", shape=[ROWS, K])], [builders.vi("y", shape=[ROWS, K])], inits)


def test_a_weight_read_in_a_loop_body_is_skipped_with_a_word(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_loop_model(), str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024,
                                    calibration=[{"x": builders.rand((ROWS, K), s)} for s in range(4)])
    onnx.checker.check_model(onnx.load(str(tmp_path / "q.onnx")))
    q = report.pass_report("quantize").details
    assert q["quantized"] == ["W"]
    assert q["not_calibrated"]["W"] == "read inside a Loop/Scan body or a nested If, whose values are not measured"
