"""A dynamic feature axis takes the width the first layer reading it contracts (running/read_widths.py):
madmom's trackers declare [frames, features] with both dynamic, and 32 or 512 features fail in
their first LSTM; verification on generated inputs then refused every command."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.running.read_widths import read_widths


def _tracker(features: int = 20, hidden: int = 8) -> onnx.ModelProto:
    """x [frames, features] -> Unsqueeze(axis 1) -> LSTM -> Squeeze -> MatMul -> y, as madmom's."""
    inits = [numpy_helper.from_array(builders.rand((1, 4 * hidden, features), 1) * 0.3, "W"),
             numpy_helper.from_array(builders.rand((1, 4 * hidden, hidden), 2) * 0.3, "R"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(builders.rand((hidden, 3), 3), "Out")]
    nodes = [helper.make_node("Unsqueeze", ["x", "axis1"], ["x3"]),
             helper.make_node("LSTM", ["x3", "W", "R"], ["seq"], hidden_size=hidden),
             helper.make_node("Squeeze", ["seq", "axis1"], ["h"]),
             helper.make_node("Squeeze", ["h", "axis1"], ["h2"]),
             helper.make_node("MatMul", ["h2", "Out"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=["frames", "features"])],
                          [builders.vi("y", shape=["a", "b"])], inits, opset=17)


def test_the_width_comes_from_the_first_layer():
    assert read_widths(_tracker(features=20)) == {"x": 20}
    # a MatMul's K, through an elementwise op with a constant
    nodes = [helper.make_node("Mul", ["x", "s"], ["xs"]), helper.make_node("MatMul", ["xs", "W"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=["n", "k"])], [builders.vi("y", shape=["a", "b"])],
                           [numpy_helper.from_array(np.float32(2), "s"),
                            numpy_helper.from_array(builders.rand((24, 4), 1), "W")])
    assert read_widths(model) == {"x": 24}


def test_an_op_that_adds_the_last_axis_tells_nothing():
    nodes = [helper.make_node("Unsqueeze", ["x", "last"], ["x3"]), helper.make_node("MatMul", ["x3", "W"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=["n", "k"])], [builders.vi("y", shape=["a", "b"])],
                           [numpy_helper.from_array(np.array([-1], np.int64), "last"),
                            numpy_helper.from_array(builders.rand((1, 4), 1), "W")], opset=17)
    assert read_widths(model) == {}


def test_a_tracker_with_dynamic_features_quantizes_on_generated_inputs(tmp_path):
    onnx.save(_tracker(features=20, hidden=64), str(tmp_path / "m.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "m.onnx", tmp_path / "q.onnx", min_elements=1024)
    assert report.verification["generated"] and report.verification["rel_l2_error"] < 0.1
    assert (tmp_path / "q.onnx").exists()


def _cells(width: int = 64) -> onnx.ModelProto:
    """LORE's regressor in small (lore_process, the zoo's twenty-sixth round): two inputs named
    [batch, height, width] alike by the exporter, the features added to position embeddings that
    the cells' corners pick, then a MatMul. The features' width is the embeddings', not the corners'."""
    inits = [numpy_helper.from_array(builders.rand((width, width), 1), "pos"),
             numpy_helper.from_array(np.array([0], np.int64), "first"),
             numpy_helper.from_array(builders.rand((width, 8), 2), "W")]
    nodes = [helper.make_node("Gather", ["cells", "first"], ["c0"], axis=2),
             helper.make_node("Squeeze", ["c0"], ["c1"], axes=[2]),
             helper.make_node("Gather", ["pos", "c1"], ["pe"], axis=0),
             helper.make_node("Add", ["feat", "pe"], ["s"]),
             helper.make_node("MatMul", ["s", "W"], ["y"])]
    return builders.model(nodes, [builders.vi("feat", shape=["batch", "height", "width"]),
                                  builders.vi("cells", onnx.TensorProto.INT64, ["batch", "height", "width"])],
                          [builders.vi("y", shape=["batch", "height", 8])], inits, opset=11)


def test_the_width_comes_through_a_sum_with_a_computed_tensor():
    assert read_widths(_cells(64)) == {"feat": 64}


def test_inputs_sharing_dimension_names_quantize_on_generated_inputs(tmp_path):
    # the generated features were 32 wide (the shared "width"), the embeddings 64: onnxruntime refused
    # to broadcast, and `quant` refused the model ("does not run on generated inputs")
    onnx.save(_cells(64), str(tmp_path / "m.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "m.onnx", tmp_path / "q.onnx", min_elements=256)
    assert report.verification["generated"] and np.isfinite(report.verification["rel_l2_error"])


def test_the_width_comes_from_a_weight_stored_in_16_bits():
    # the zoo's bf16 variant of lore_process: each weight a bfloat16 initializer and a Cast to float
    model = _cells(64)
    graph = model.graph
    w = next(t for t in graph.initializer if t.name == "W")
    stored = helper.make_tensor("W16", onnx.TensorProto.FLOAT16, list(w.dims),
                                numpy_helper.to_array(w).astype(np.float16).view(np.uint16).ravel().tolist())
    graph.initializer.remove(w)
    graph.initializer.append(stored)
    graph.node.insert(0, helper.make_node("Cast", ["W16"], ["W"], to=onnx.TensorProto.FLOAT))
    assert read_widths(model) == {"feat": 64}
