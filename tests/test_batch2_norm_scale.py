"""A norm's affine Add in front of a Conv, with equalization's channel scale put between them by
the quantizer (terrain_diffusion's GroupNorms): both constants [C, 1, 1] scale each sample alike,
so the result's readers are the input's and verification's batch-2 sample is not run
(running/per_sample.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

import builders
from onnxsurgery.running.readers import same_readers


def _normed(path, scale=None) -> None:
    """x [batch, 4, 8, 8] -> Reshape into groups and back (the rank unsaid there, as a GroupNorm's
    export writes it) -> Add a bias -> [Mul by `scale`'s shape] -> Conv."""
    shapes = [np.array([0, 2, -1], np.int64), np.array([0, 4, 8, 8], np.int64)]
    constants = [onnx.numpy_helper.from_array(builders.rand((4, 4, 3, 3), 1), "W"),
                 onnx.numpy_helper.from_array(builders.rand((4, 1, 1), 2), "bias"),
                 onnx.numpy_helper.from_array(shapes[0], "grouped"), onnx.numpy_helper.from_array(shapes[1], "back")]
    nodes = [helper.make_node("Reshape", ["x", "grouped"], ["g"]), helper.make_node("Reshape", ["g", "back"], ["r"]),
             helper.make_node("Add", ["r", "bias"], ["n"])]
    x = "n"
    if scale is not None:
        constants.append(onnx.numpy_helper.from_array(np.full(scale, 2.0, np.float32), "s_in"))
        nodes.append(helper.make_node("Mul", ["n", "s_in"], ["ns"]))
        x = "ns"
    nodes.append(helper.make_node("Conv", [x, "W"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    onnx.save(builders.model(nodes, [builders.vi("x", shape=["batch", 4, 8, 8])],
                             [builders.vi("y", shape=["batch", 4, 8, 8])], constants), str(path))


def test_a_channel_scale_between_a_bias_and_its_conv_runs_batch_one(tmp_path):
    _normed(tmp_path / "in.onnx")
    _normed(tmp_path / "scaled.onnx", scale=(4, 1, 1))
    assert same_readers(tmp_path / "in.onnx", tmp_path / "scaled.onnx")


def test_a_scale_that_spans_the_batch_keeps_batch_two(tmp_path):
    _normed(tmp_path / "in.onnx")
    _normed(tmp_path / "batch.onnx", scale=(2, 1, 1, 1))  # lines up with axis 0 at batch 2
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "batch.onnx")
