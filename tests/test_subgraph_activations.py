"""What reads activations (auto's measured choices on --inputs, GPTQ on --calibration) reaches
a weight read inside the branches of a main-graph If (a merged decoder's weights, read in both
branches of its `If` on use_cache_branch), and the model is never made invalid; a Loop body's
readers are skipped with a word (test_branch_calibration.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery


def _branches_model():
    """x -> MatMul(W0) -> If(c) { then: MatMul(h, W) ; else: MatMul(h, W) + h } -> y. W lives in the
    main graph, read only from inside the branches (so its scope is the main graph)."""
    out = lambda name: builders.vi(name, shape=[4, 64])  # noqa: E731
    then_g = helper.make_graph([helper.make_node("MatMul", ["h", "W"], ["t"])], "then", [], [out("t")])
    else_g = helper.make_graph([helper.make_node("MatMul", ["h", "W"], ["e0"]),
                                helper.make_node("Add", ["e0", "h"], ["e"])], "else", [], [out("e")])
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    inits = [numpy_helper.from_array(builders.rand((64, 64), 1) * 0.1, "W0"),
             numpy_helper.from_array(builders.rand((64, 64), 2) * 0.1, "W")]
    return builders.model(nodes, [builders.vi("x", shape=[4, 64]), builders.vi("c", TensorProto.BOOL, [])],
                          [out("y")], inits)


def _samples(seeds, cond=True):
    return [{"x": builders.rand((4, 64), s), "c": np.array(cond)} for s in seeds]


def test_weights_read_inside_branches_are_calibrated_on_the_branch_taken(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_branches_model(), str(src))
    for cond in (True, False):
        report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024, samples=_samples([7], cond),
                                        calibration=_samples(range(8), cond))
        onnx.checker.check_model(onnx.load(str(tmp_path / "q.onnx")))
        q = report.pass_report("quantize").details
        assert sorted(q["quantized"]) == ["W", "W0"]
        # reached: GPTQ then keeps its rounding or not on held-out samples
        assert "W" in q["calibrated"] or q["not_calibrated"]["W"].startswith("GPTQ fitted")
        # W0 reads a main-graph value: calibration reaches it (GPTQ then keeps it or not on held-out samples)
        assert "W0" in q["calibrated"] or "If/Loop/Scan" not in q["not_calibrated"]["W0"]
        assert report.verification["rel_l2_error"] < 0.05
    plan = onnxsurgery.quant_plan(src, min_elements=1024, samples=_samples([7]))
    assert {w.name for w in plan.changed} == {"W", "W0"}
