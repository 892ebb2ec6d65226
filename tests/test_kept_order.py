"""`npy` then `embed` give back the input's node order (onnxsurgery/kept_order.py): onnxruntime
optimizes the nodes in list order, and the zoo's effword_resnet50_arc computed outputs 1.4e-7
apart when gs's depth order replaced the exporter's."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.kept_order import keep_input_order


def _interleaved() -> onnx.ModelProto:
    """x -> Relu -> Relu and x -> Neg, listed branch after branch: gs's sort by depth would put
    the Neg (depth 1) before the second Relu (depth 2). A 1 KB weight for `npy` to move."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 256, dtype=np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node("Neg", ["x"], ["c"], name="neg"), helper.make_node("Add", ["b", "c"], ["d"], name="add"),
             helper.make_node("Mul", ["d", "w"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _order(path) -> list[str]:
    return [n.name for n in onnx.load(str(path), load_external_data=False).graph.node]


def test_npy_then_embed_keep_the_input_node_order(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_interleaved(), src)
    onnxsurgery.npy_file(src, tmp_path / "npy.onnx")
    onnxsurgery.embed_file(tmp_path / "npy.onnx", tmp_path / "back.onnx")
    assert _order(tmp_path / "npy.onnx") == ["r1", "r2", "neg", "add", "mul"]
    assert _order(tmp_path / "back.onnx") == ["r1", "r2", "neg", "add", "mul"]


def test_an_order_that_is_no_longer_topological_is_not_taken():
    model = _interleaved()
    source = onnx.ModelProto()
    source.CopyFrom(model)
    nodes = list(source.graph.node)
    del source.graph.node[:]
    source.graph.node.extend([nodes[1], nodes[0], *nodes[2:]])  # r2 before the r1 that makes its input
    assert [n.name for n in keep_input_order(model, source).graph.node] == ["r1", "r2", "neg", "add", "mul"]


def test_a_node_the_input_lacks_keeps_the_sorted_order():
    model = _interleaved()
    source = onnx.ModelProto()
    source.CopyFrom(model)
    source.graph.node[2].output[0] = "other"  # not the exported model's Neg
    before = [n.name for n in model.graph.node]
    assert [n.name for n in keep_input_order(model, source).graph.node] == before
