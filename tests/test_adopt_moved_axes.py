"""opset.adopt_upgrade(moved_axes=True) (upgrade_axes.py): where the converter only moved
ReduceMean's `axes` to Constant inputs (17 -> 21), the workspace's graph takes those nodes instead
of the upgraded model being imported again, and exports byte for byte what that import does;
any other change leaves the graph as it was, for the second import."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.opset import adopt_upgrade, upgrade_opset
from onnxsurgery.pipeline import open_workspace
from onnxsurgery.upgrade_changes import moved_axes_only


def _model(output_dim="n") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("ReduceMean", ["h"], ["m"], axes=[-1], keepdims=1, name="mean"),
             helper.make_node("Sub", ["h", "m"], ["c"], name="sub"),
             helper.make_node("ReduceMean", ["c"], ["v"], axes=[1], keepdims=1, name="mean2"),
             helper.make_node("Add", ["c", "v"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, output_dim])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _exported(ws) -> bytes:
    return ws.finish().SerializeToString()


def test_moved_axes_are_adopted_as_a_second_import_gives_them():
    model = _model()
    upgraded = upgrade_opset(model, 21)
    assert moved_axes_only(model, upgraded) and len(upgraded.graph.node) == len(model.graph.node) + 2
    again = open_workspace(upgraded)
    ws = open_workspace(model)
    assert adopt_upgrade(ws.graph, ws.template, upgraded, moved_axes=True)
    assert ws.opsets[""] == 21 and len(ws.graph.nodes) == 7
    assert all("axes" not in n.attrs and len(n.inputs) == 2 for n in ws.graph.nodes if n.op == "ReduceMean")
    assert _exported(ws) == _exported(again)


def test_an_output_shape_the_converter_refined_is_taken():
    """fracast_forecaster's case: the output's symbolic dimension became 16 in the converted copy."""
    model = _model(output_dim="d")
    upgraded = upgrade_opset(model, 21)
    assert upgraded.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 16
    again = open_workspace(upgraded)
    ws = open_workspace(model)
    assert adopt_upgrade(ws.graph, ws.template, upgraded, moved_axes=True)
    assert ws.graph.outputs[0].shape == [2, 16] == again.graph.outputs[0].shape
    assert _exported(ws) == _exported(again)


def test_axes_of_other_values_leave_the_graph_as_it_was():
    model = _model()
    upgraded = upgrade_opset(model, 21)
    const = next(n for n in upgraded.graph.node if n.op_type == "Constant")
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([0], np.int64)))
    ws = open_workspace(model)
    before = _exported(open_workspace(model))
    assert not adopt_upgrade(ws.graph, ws.template, upgraded, moved_axes=True)
    assert ws.opsets[""] == 17 and _exported(ws) == before


def test_a_new_name_taken_by_the_graph_leaves_it_as_it_was():
    model = _model()
    upgraded = upgrade_opset(model, 21)
    const = next(n for n in upgraded.graph.node if n.op_type == "Constant")
    reader = next(n for n in upgraded.graph.node if const.output[0] in n.input)
    reader.input[1] = const.output[0] = "h"  # an existing tensor's name
    ws = open_workspace(model)
    assert not adopt_upgrade(ws.graph, ws.template, upgraded, moved_axes=True)
    assert all("axes" in n.attrs for n in ws.graph.nodes if n.op == "ReduceMean")


def test_a_payload_stating_its_default_place_is_imported_again():
    """The converter's copy leaves out `data_location: DEFAULT`, gs exports the input's proto as
    read: the adopted graph would write 2 bytes more for it than the second import does."""
    model = _model()
    model.graph.initializer[0].data_location = TensorProto.DEFAULT
    upgraded = upgrade_opset(model, 21)
    assert not upgraded.graph.initializer[0].HasField("data_location")
    ws = open_workspace(model)
    assert not adopt_upgrade(ws.graph, ws.template, upgraded, moved_axes=True)
    assert ws.opsets[""] == 17
