"""The two --inputs candidates that run beside each other on two threads get one intra-op thread
each (api/built.py, `candidate_runs(threads=1)`): the same outputs, bit for bit, as a session with
onnxruntime's own thread count, since the kept candidate's outputs are verification's."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

import builders


def _conv_net(path) -> None:
    nodes = [helper.make_node("Conv", ["x", "W1"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "W2"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c"], ["y"], axes=[2, 3], keepdims=0)]
    inits = [onnx.numpy_helper.from_array(builders.rand((32, 8, 3, 3), 1), "W1"),
             onnx.numpy_helper.from_array(builders.rand((16, 32, 3, 3), 2), "W2")]
    onnx.save(builders.model(nodes, [builders.vi("x", shape=[2, 8, 48, 48])], [builders.vi("y", shape=[2, 16])],
                             inits, opset=17), str(path))


def test_threads_sets_the_intra_op_count_and_nothing_else():
    from onnxsurgery.running.sessions import session_settings

    one, kwargs = session_settings(layout=True, beside=True, threads=1)
    default, default_kwargs = session_settings(layout=True, beside=True)
    assert one.intra_op_num_threads == 1 and default.intra_op_num_threads == 0
    assert kwargs == default_kwargs
    assert one.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_one_thread_computes_what_the_default_count_does(tmp_path):
    from onnxsurgery.api.built import candidate_runs

    _conv_net(tmp_path / "m.onnx")
    feeds = [{"x": builders.rand((2, 8, 48, 48), seed)} for seed in (3, 4)]
    one, unfolded = candidate_runs(tmp_path / "m.onnx", ["y"], feeds, threads=1)
    default, _ = candidate_runs(tmp_path / "m.onnx", ["y"], feeds)
    assert unfolded and len(one) == len(default) == 2
    assert all(a.tobytes() == b.tobytes() for r, s in zip(one, default) for a, b in zip(r, s))
    assert np.isfinite(one[0][0]).all()

