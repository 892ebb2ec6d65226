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
