"""quant's opset upgrade where onnx's converter only moved `axes` attributes into Constant inputs
(ReduceMean at 18: a decoder's RMSNorm): its own check, one more run of the float model, is not
asked (upgrade_changes.moved_axes_only); any other change still is."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _norm_model(opset: int = 17) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], keepdims=1, name="mean"),
             helper.make_node("Sub", ["x", "mean"], ["centered"], name="center"),
             helper.make_node("MatMul", ["centered", "w"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_axes_moved_to_an_input_is_the_same_computation():
    from onnxsurgery.upgrade_changes import moved_axes_only, same_computation
    from onnxsurgery.opset import upgrade_opset

    before = _norm_model()
    after = upgrade_opset(before, 21)
    assert not same_computation(before, after) and moved_axes_only(before, after)
    other = onnx.ModelProto()
    other.CopyFrom(after)
    constant = next(n for n in other.graph.node if n.op_type == "Constant")
    constant.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([0], np.int64)))  # other axes
    assert not moved_axes_only(before, other)
    other.CopyFrom(after)
    next(n for n in other.graph.node if n.op_type == "Sub").op_type = "Add"  # another node changed
    assert not moved_axes_only(before, other)
    other.CopyFrom(after)
    other.graph.node.append(helper.make_node("Identity", [constant.output[0]], ["also"]))  # read twice
    assert not moved_axes_only(before, other)


@pytest.mark.parametrize("renamed", [False, True])
def test_its_check_is_not_run_where_only_axes_moved(tmp_path, monkeypatch, renamed):
    import onnxsurgery
    from onnxsurgery.api import quant_steps

    checked = []
    monkeypatch.setattr(quant_steps, "_check_upgrade", lambda *a, **k: checked.append(1))
    if renamed:  # a converter that also renamed a node: its check is asked
        real = quant_steps.upgrade_opset

        def renaming(model, opset):
            upgraded = real(model, opset)
            next(n for n in upgraded.graph.node if n.op_type == "MatMul").name = "renamed"
            return upgraded

        monkeypatch.setattr(quant_steps, "upgrade_opset", renaming)
    onnx.save(_norm_model(), str(tmp_path / "in.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", dtype="int4", min_elements=1024)
    assert report.verification["rel_l2_error"] > 0.05  # large: the check would be asked
    assert checked == ([1] if renamed else [])
    assert any("axes attributes moved" in n for n in report.notes) != renamed
