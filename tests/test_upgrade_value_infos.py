"""opset.upgrade_opset keeps the input's value infos where onnx's strict shape inference of the
converted graph agrees with them (onnxruntime plans a run's buffers from them: terrain_diffusion's
upgraded model held twice the memory without), and drops them all where one contradicts."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.opset import upgrade_opset


def _model(h_shape=(2, 4, 8)) -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([2, 4, 8], np.int64), "shape")
    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["h"]),  # Reshape: versions 14, 19, 21 after 13
             helper.make_node("MatMul", ["h", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])], [shape, w],
                              value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, list(h_shape)),
                                          helper.make_tensor_value_info("m", TensorProto.FLOAT, ["b", 4, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_agreeing_value_infos_are_kept():
    model = _model()
    upgraded = upgrade_opset(model, 21)
    assert upgraded.opset_import[0].version == 21
    assert [v.SerializeToString() for v in upgraded.graph.value_info] == \
        [v.SerializeToString() for v in model.graph.value_info]


def test_a_contradicting_value_info_drops_them_all():
    upgraded = upgrade_opset(_model(h_shape=(2, 4, 9)), 21)
    assert upgraded.opset_import[0].version == 21
    assert not upgraded.graph.value_info


def test_the_upgrade_computes_what_the_input_computes():
    import onnxruntime as ort

    model = _model()
    upgraded = upgrade_opset(model, 21)
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
        None, {"x": x})[0]
    np.testing.assert_array_equal(run(model), run(upgraded))
