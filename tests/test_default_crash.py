"""A graph onnxruntime 1.32's default session dies on (signal 11) while verification's sessions,
the NchwcTransformer off, load it: a float16 Transpose [1, 0, 2] read as A by a MatMul whose B is
a float16 constant (arabic-diacritizer's BiLSTM in float16, zoo round 23). The report names it.
No session here is a default one: nothing in these tests may crash."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import quant_file
from onnxsurgery.running.default_crash import default_session_crash


def _model(dtype=TensorProto.FLOAT16, perm=(1, 0, 2), b_is_input=False, k=64) -> onnx.ModelProto:
    np_type = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((k, k)) / 8).astype(np_type), "w")
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=list(perm), name="swap"),
             helper.make_node("MatMul", ["xt", "w"], ["y"], name="proj")]
    shape = ["T", "B", k] if perm[2] == 2 else ["B", k, "T"]
    inputs = [helper.make_tensor_value_info("x", dtype, shape)]
    if b_is_input:
        inputs.append(helper.make_tensor_value_info("w", dtype, [k, k]))
    g = helper.make_graph(nodes, "t", inputs, [helper.make_tensor_value_info("y", dtype, None)],
                          [] if b_is_input else [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_crashing_edge_is_found_and_only_it():
    assert "proj" in default_session_crash(_model(), version="1.32.0")
    assert default_session_crash(_model(TensorProto.FLOAT), version="1.32.0") is None
    assert default_session_crash(_model(perm=(0, 2, 1)), version="1.32.0") is None
    assert default_session_crash(_model(b_is_input=True), version="1.32.0") is None
    assert default_session_crash(_model(), version="1.31.0") is None  # measured on 1.32 only


def test_quant_of_it_verifies_and_says_a_default_session_dies(tmp_path):
    """A folded form asked for (the default's plan avoids the edge: tests/test_crash_edges.py)."""
    src, out = tmp_path / "half.onnx", tmp_path / "q.onnx"
    onnx.save(_model(), src)
    report = quant_file(src, out, min_elements=16, lowering="arith")
    said = report.verification["runtime"]
    assert ("NchwcTransformer" in said) == ort.__version__.startswith("1.32.")
    assert report.verification["rel_l2_error"] < 0.05


def test_a_float32_model_is_verified_as_before(tmp_path):
    src, out = tmp_path / "single.onnx", tmp_path / "q.onnx"
    onnx.save(_model(TensorProto.FLOAT), src)
    report = quant_file(src, out, min_elements=16)
    assert "NchwcTransformer" not in report.verification["runtime"]


def test_the_rule_looks_inside_subgraphs():
    inner = _model().graph
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)
    branch = helper.make_graph(list(inner.node), "b", [], [y], list(inner.initializer))
    node = helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=branch, name="choose")
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT16, None)
    g = helper.make_graph([node], "o", [cond, *inner.input], [z])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert "proj" in default_session_crash(model, version="1.32.0")


def test_a_kept_crash_is_said_of_the_written_model_only():
    from onnxsurgery.running.default_crash import kept_crash

    crashing, fine = _model(), _model(TensorProto.FLOAT)
    assert "as a default session of its input does" in kept_crash(crashing, crashing, version="1.32.0")
    assert "where its input's loads" in kept_crash(crashing, fine, version="1.32.0")
    assert kept_crash(fine, crashing, version="1.32.0") is None
    assert kept_crash(crashing, crashing, version="1.31.0") is None
