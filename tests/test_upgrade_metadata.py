"""quant's opset upgrade where onnx's converter changed only what computes nothing: it does not
copy the torch exporter's `metadata_props` of nodes and graph inputs, nor a tensor's
`data_location` written as its default (DEFAULT). The upgrade is then the version stamp alone
(upgrade_changes.same_computation): its own check, one more run of the float model, is not
asked, and the workspace takes the stamp instead of importing the model again; any other
change still asks for the check."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
    b.data_location = TensorProto.DEFAULT  # written out, as some exporters do
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Add", ["h", "b"], ["y"], name="bias")]
    for node in nodes:
        node.metadata_props.add(key="pkg.torch.onnx.fx_node", value=f"%{node.name} : call_function")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])
    x.metadata_props.add(key="pkg.torch.export.graph_signature.InputSpec.kind", value="USER_INPUT")
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
                              [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_metadata_and_a_default_location_are_no_change():
    from onnxsurgery.opset import upgrade_opset
    from onnxsurgery.upgrade_changes import moved_axes_only, same_computation

    before = _model()
    after = upgrade_opset(before, 21)
    assert not any(len(n.metadata_props) for n in after.graph.node)  # what the converter drops
    assert same_computation(before, after) and moved_axes_only(before, after)
    other = onnx.ModelProto()
    other.CopyFrom(after)
    other.graph.node[1].op_type = "Sub"  # a node that computes otherwise
    assert not same_computation(before, other) and not moved_axes_only(before, other)
    other.CopyFrom(after)
    other.graph.initializer[1].float_data.extend([0.0] * 64)  # other values
    other.graph.initializer[1].ClearField("raw_data")
    assert not same_computation(before, other)
    other.CopyFrom(after)
    other.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16  # another input type
    assert not same_computation(before, other)


def test_its_check_is_not_run_and_the_graph_is_not_imported_again(tmp_path, monkeypatch):
    import onnxsurgery
    from onnxsurgery.api import quant_steps

    checked, opened = [], []
    monkeypatch.setattr(quant_steps, "_check_upgrade", lambda *a, **k: checked.append(1))
    real_open = quant_steps.open_workspace
    monkeypatch.setattr(quant_steps, "open_workspace", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    onnx.save(_model(), str(tmp_path / "in.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", dtype="int4", min_elements=1024)
    assert report.verification["rel_l2_error"] > 0.05  # large: a deferred check would be asked
    assert checked == [] and opened == []
    assert any("only the version stamp" in n for n in report.notes)
    written = onnx.load(str(tmp_path / "q.onnx"))
    assert written.opset_import[0].version == 21
