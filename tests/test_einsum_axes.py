"""An Einsum weight's output channel is read from the equation (quantization/axes.py einsum_axes):
the weight's one subscript that only the output keeps. A grouped linear (`btgi,gih->btgh`,
DeepFilterNet3's df_fc_emb) takes a scale per group and channel, a block the length of its summed
axis; a plain projection (`abcd,cde->abe`) a scale per `e`. Before, any Einsum weight took one
scale per slice of its first axis (the groups, or the heads). int4's blocks stay as they ran."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnxsurgery

import builders


def einsum_model(tmp_path, equation: str, x_shape, w: np.ndarray, y_shape) -> str:
    """The Einsum, beside a GRU whose weights are kept quantized at load (so that the Einsum's
    lean form keeps the model under the float model's memory, as in DeepFilterNet3's encoder)."""
    rng = np.random.default_rng(2)
    gru = [numpy_helper.from_array((rng.standard_normal((1, 384, 128)) * 0.1).astype(np.float32), n) for n in "GR"]
    nodes = [helper.make_node("Einsum", ["x", "W"], ["y"], equation=equation),
             helper.make_node("GRU", ["s", "G", "R"], ["h"], hidden_size=128)]
    model = builders.model(nodes, [builders.vi("x", shape=x_shape), builders.vi("s", shape=[3, 1, 128])],
                           [builders.vi("y", shape=y_shape), builders.vi("h", shape=[3, 1, 1, 128])],
                           [numpy_helper.from_array(w, "W"), *gru], opset=17)
    src = tmp_path / "einsum.onnx"
    onnx.save(model, str(src))
    return src


def grouped_weight() -> np.ndarray:
    """32 groups x 96 inputs x 16 outputs (past the small weights' float16) whose output channels'
    ranges are 100x apart: one scale per group (or per channel over all groups) rounds the small
    ones coarsely."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 96, 16)).astype(np.float32)
    return w * np.geomspace(0.01, 1.0, 32 * 16).reshape(32, 1, 16).astype(np.float32)


def test_a_grouped_einsum_weight_takes_a_scale_per_group_and_channel(tmp_path):
    src = einsum_model(tmp_path, "btgi,gih->btgh", [1, 5, 32, 96], grouped_weight(), [1, 5, 32, 16])
    w = onnxsurgery.quant_plan(src, min_elements=1024).weights[0]
    assert (w.dtype, w.granularity, w.axis, w.block_size) == ("int8", "block", 1, 96), w
    feeds = {"x": builders.rand((1, 5, 32, 96), 1), "s": builders.rand((3, 1, 128), 2)}
    builders.quantized_within(src, tmp_path / "q.onnx", feeds, 0.01, min_elements=1024)


def test_a_projection_einsum_weight_takes_its_output_axis(tmp_path):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((8, 64, 64)) * np.geomspace(0.01, 1.0, 64)).astype(np.float32)
    src = einsum_model(tmp_path, "abcd,cde->abe", [1, 7, 8, 64], w, [1, 7, 64])
    plan = onnxsurgery.quant_plan(src, min_elements=1024).weights[0]
    assert (plan.granularity, plan.axis) == ("channel", 2), plan


def test_an_einsum_of_two_activations_or_with_an_ellipsis_keeps_the_first_axis():
    from onnxsurgery.quantization.axes import einsum_axes

    class Node:  # einsum_axes reads only the equation
        def __init__(self, equation):
            self.attrs = {"equation": equation}

    assert einsum_axes(Node("btgi,gih->btgh"), 1, (8, 96, 16)) == (2, 1, (0,))
    assert einsum_axes(Node("abcd, cde -> abe"), 1, (4, 16, 64)) == (2, 1, ())
    assert einsum_axes(Node("...i,ih->...h"), 1, (16, 8)) is None
    assert einsum_axes(Node("ij,jk->ijk"), 1, (4, 5)) is None  # nothing summed
    assert einsum_axes(Node("bi,bij->bj"), 1, (2, 4, 5)) == (2, 1, (0,))


def test_int4_blocks_of_an_einsum_weight_keep_running_along_its_last_axis(tmp_path, int4_forms_alone):
    src = einsum_model(tmp_path, "btgi,gih->btgh", [1, 5, 32, 96], grouped_weight(), [1, 5, 32, 16])
    w = onnxsurgery.quant_plan(src, min_elements=1024, dtype="int4").weights[0]
    assert (w.dtype, w.granularity, w.axis) == ("int4", "block", 2), w
