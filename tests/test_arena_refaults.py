"""A run that maps gigabytes of buffers of 32 MiB or more afresh takes onnxruntime's arena
(running/arena.py `refaults`, `for_generated`; issue 58, inputs18: czann_nucleus_det's tiles).
Shapes only: no model here is run at the sizes it is judged at."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.running import arena


def _chain(path, relus: int, dims=("n", 1 << 23), weight=16):
    """x [N, C] -> Relu x `relus` -> Mul by a scalar: each value x's size; beside it an initializer of
    `weight` floats (the model's largest weight)."""
    w = numpy_helper.from_array(np.float32(1.0), "w")
    big = numpy_helper.from_array(np.ones(weight, np.float32), "unused")
    nodes, last = [], "x"
    for i in range(relus):
        nodes.append(helper.make_node("Relu", [last], [f"r{i}"]))
        last = f"r{i}"
    nodes.append(helper.make_node("Mul", [last, "w"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))], [w, big])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def _lazy(shape):  # the shape of a large sample without its memory
    return np.broadcast_to(np.float32(1.0), shape)


def test_gigabytes_of_large_buffers_a_run_take_the_arena(tmp_path):
    many = _chain(tmp_path / "many.onnx", 32)  # 33 values of 32 MiB at batch 1: 1.03 GiB a run
    few = _chain(tmp_path / "few.onnx", 8)  # 9: 288 MiB
    assert arena.arena_verdict(many, [{"x": _lazy((1, 1 << 23))}]).on is True
    assert arena.arena_verdict(few, [{"x": _lazy((1, 1 << 23))}]).on is False  # glibc's maps, as before
    # the middling band is as it was, whatever the count
    assert arena.arena_verdict(many, [{"x": _lazy((1, 1 << 18))}]).on is True
    assert arena.arena_verdict(many, [{"x": _lazy((1, 1 << 10))}]).on is False


def test_not_past_the_room_the_memory_bound_leaves(tmp_path):
    # 160 MiB values: one more than the bound's 128 MiB slack and 8x a 16-float weight
    path = _chain(tmp_path / "wide.onnx", 8, dims=("n", 40 << 20))
    assert arena.arena_verdict(path, [{"x": _lazy((1, 40 << 20))}]).on is False
    heavy = _chain(tmp_path / "heavy.onnx", 8, dims=("n", 40 << 20), weight=1 << 20)  # a 4 MiB weight: 160 MiB room
    assert arena.arena_verdict(heavy, [{"x": _lazy((1, 40 << 20))}]).on is True


def test_generated_inputs_only_where_the_shapes_are_fixed_but_the_batch(tmp_path):
    assert arena.for_generated(_chain(tmp_path / "fixed.onnx", 32))
    assert not arena.for_generated(_chain(tmp_path / "few.onnx", 8))
    assert not arena.for_generated(_chain(tmp_path / "dynamic.onnx", 32, dims=("n", "c")))  # its session sizes it
    assert not arena.for_generated(_chain(tmp_path / "shaped.onnx", 32), shapes={"x": [1, 1 << 23]})
    # the middling band stays as generated inputs had it: no arena
    assert not arena.for_generated(_chain(tmp_path / "middling.onnx", 32, dims=("n", 1 << 18)))
