"""`quant --inputs`' capture takes onnxruntime's arena only where shapes decide the verdict for it
and none of the values it returns reaches 8 MiB (running/arena.py `for_capture`): those values
live until the run returns, in the arena's regions. Its outputs are the same either way."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.quantization.calibration import Calibration
from onnxsurgery.running import arena
from onnxsurgery.running.arena import ArenaSession


def _model(path):
    """x [N, C] -> Relu r -> Mul m -> Tile t (3 rows of r) -> ReduceSum y: t is 3x x's size."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    reps = numpy_helper.from_array(np.array([3, 1], np.int64), "reps")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["m"]),
         helper.make_node("Tile", ["m", "reps"], ["t"]), helper.make_node("ReduceSum", ["t"], ["y"], keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [two, reps])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=8), path)
    return path


def test_the_capture_takes_the_arena_where_its_outputs_are_small(tmp_path):
    path = _model(tmp_path / "m.onnx")
    samples = [{"x": np.ones((1024, 1024), np.float32)}]  # 4 MiB activations; t 12 MiB
    assert arena.arena_verdict(path, samples).on is True  # none reaches 32 MiB
    assert arena.for_capture(path, samples, ["r", "m", "y"])
    assert not arena.for_capture(path, samples, ["r", "t"])  # 12 MiB held to the run's end
    small = [{"x": np.ones((4, 4), np.float32)}]  # the verdict says no: nothing to fragment
    assert not arena.for_capture(path, small, ["r"])
    assert not arena.for_capture(path, [], ["r"])


def test_an_unsized_output_is_taken_as_the_verdict_takes_it(tmp_path):
    path = _model(tmp_path / "m.onnx")
    samples = [{"x": np.ones((1024, 1024), np.float32)}]
    sizes, computed = arena.value_sizes(path, samples[0])
    assert sizes["t"] == 12 << 20 and computed == 4
    assert arena.value_sizes(path, samples[0]) == (sizes, computed)  # kept: one inference for both
    assert arena.for_capture(path, samples, ["r", "not_sized_here"])


def test_the_captures_probe_returns_the_same_values_with_the_arena(tmp_path, monkeypatch):
    path = _model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1024, 1024)).astype(np.float32)}]
    with_arena = Calibration(path, samples)._probe({}, ["r", "m"])
    assert isinstance(with_arena, ArenaSession)
    got = with_arena.run(["r", "m"], samples[0])
    monkeypatch.setattr(arena, "for_capture", lambda *a: False)
    without = Calibration(path, samples)._probe({}, ["r", "m"])
    assert not isinstance(without, ArenaSession)
    for a, b in zip(got, without.run(["r", "m"], samples[0])):
        np.testing.assert_array_equal(a, b)
