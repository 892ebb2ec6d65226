"""A comparison keeps the reference's outputs while the candidate runs; from a session with
onnxruntime's arena they are copied out of its buffers first (arena.owned): onnxruntime's arrays are
views of them, and a kept view holds the arena region it lies in through every shrink and past the
session's end (u2netp_rembg's `compare`: 80-130 MB more under the candidate's runs). The values are
the same."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.running import arena
from onnxsurgery.running.verify import compare_models


def _model(path, factor: float):
    """x [N, C] -> Relu -> Mul by `factor` -> Add x: activations of x's size (4 MiB at 1024 x 1024:
    the arena's side, arena.pays)."""
    k = numpy_helper.from_array(np.array(factor, np.float32), "k")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "k"], ["m"]),
         helper.make_node("Add", ["m", "x"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c"])], [k])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_owned_copies_views_only():
    base = np.arange(12, dtype=np.float32)
    view, own, table = base.reshape(3, 4), np.ones(3), [{"a": 1.0}]
    got = arena.owned([view, own, table])
    assert got[0] is not view and got[0].base is None and np.array_equal(got[0], view)
    assert got[1] is own and got[2] is table


def test_reference_outputs_kept_from_the_arena_are_their_own(tmp_path):
    ref, cand = _model(tmp_path / "a.onnx", 2.0), _model(tmp_path / "b.onnx", 2.5)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1024, 1024), dtype=np.float32)} for _ in range(2)]
    assert arena.arena_verdict(ref, samples).on  # the sessions run with the arena
    kept: dict = {}
    result = compare_models(ref, cand, samples=samples, reference_runs=kept)
    (_, _, expected, _, _), = kept.values()
    for outputs, feeds in zip(expected, samples):
        (y,) = outputs
        assert y.base is None and y.flags.owndata  # not a view of onnxruntime's buffer
        x = feeds["x"]
        assert np.array_equal(y, np.maximum(x, 0) * np.float32(2.0) + x)
    assert not result["exact"] and result["rel_l2_error"] > 0
