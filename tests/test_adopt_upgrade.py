"""opset.adopt_upgrade: where the converter changed only the version stamp, the workspace's
graph takes the new stamp instead of the upgraded model being imported again; what it exports
is byte for byte what the second import exported."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.opset import adopt_upgrade, upgrade_opset
from onnxsurgery.pipeline import open_workspace
from onnxsurgery.quantization.choices import planning


def _model(with_if: bool = False, rows: int = 64) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((rows, 32)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    if with_if:
        branch = lambda v: helper.make_graph([helper.make_node("Identity", [v], ["o"])], "b", [],  # noqa: E731
                                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
        nodes[-1] = helper.make_node("If", ["c"], ["y"], then_branch=branch("r"), else_branch=branch("h"))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, rows])]
    if with_if:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])],
                              [w], value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 32]),
                                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 32])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _exported(ws) -> bytes:
    return ws.finish().SerializeToString()


def test_the_adopted_graph_exports_what_a_second_import_does():
    model = _model()
    upgraded = upgrade_opset(model, 21)
    again = open_workspace(upgraded)
    ws = open_workspace(model)
    planning.planning_for(ws.graph)  # answers asked at the old stamp are dropped with it
    assert adopt_upgrade(ws.graph, ws.template, upgraded)
    assert planning._ATTRIBUTE not in ws.graph.__dict__
    assert ws.opsets[""] == 21 and ws.graph.opset == 21
    assert next(t for t in ws.graph.tensors().values() if t.name == "h").shape == [2, 32]  # its value info kept
    written = _exported(ws)
    assert written == _exported(again)
    assert onnx.load_from_string(written).ir_version == upgraded.ir_version


def test_a_graph_with_subgraphs_is_imported_again():
    model = _model(with_if=True)
    upgraded = upgrade_opset(model, 21)
    ws = open_workspace(model)
    before = _exported(open_workspace(model))
    assert not adopt_upgrade(ws.graph, ws.template, upgraded)
    assert _exported(ws) == before  # left as it was


def test_a_value_info_naming_an_output_is_imported_again():
    model = _model()
    model.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 32]))
    upgraded = upgrade_opset(model, 21)
    ws = open_workspace(model)
    assert not adopt_upgrade(ws.graph, ws.template, upgraded)
    assert ws.opsets[""] == 13


def test_a_value_info_declaring_an_output_as_it_is_declared_is_adopted():
    """ppocr_v4_seal_det's output has a value info of the same type: gs gives the output that
    type from either, so the adopted graph exports what the second import of the upgrade does."""
    model = _model()
    model.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32]))
    upgraded = upgrade_opset(model, 21)
    again = open_workspace(upgraded)
    ws = open_workspace(model)
    assert adopt_upgrade(ws.graph, ws.template, upgraded)
    assert next(t for t in ws.graph.tensors().values() if t.name == "y").shape == [2, 32]
    assert _exported(ws) == _exported(again)


def test_quant_in_memory_leaves_the_callers_model_as_given():
    """In memory the workspace's template is the caller's own proto: upgraded by a second import
    as before, the caller's model keeps its stamp and its value infos."""
    from onnxsurgery.api import quant

    model = _model(rows=512)
    before = model.SerializeToString()
    result, _ = quant(model, dtype="int4")
    assert model.SerializeToString() == before
    assert next(o.version for o in result.opset_import if o.domain in ("", "ai.onnx")) == 21


def test_value_infos_the_upgrade_dropped_are_dropped_from_the_adopted_graph():
    """Where the input's value infos contradict the converted graph, upgrade_opset drops them:
    the adopted graph's tensors lose what they described, as a second import of it gives."""
    model = _model()
    model.graph.value_info[0].CopyFrom(helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 31]))
    upgraded = upgrade_opset(model, 21)
    assert not upgraded.graph.value_info
    again = open_workspace(upgraded)
    ws = open_workspace(model)
    assert adopt_upgrade(ws.graph, ws.template, upgraded)
    assert next(t for t in ws.graph.tensors().values() if t.name == "h").dtype is None
    assert _exported(ws) == _exported(again)
