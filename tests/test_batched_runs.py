"""A streamed model's samples that differ only in their batch run as one batch, on both sides of
a comparison (running/batched.py): one pass over the weights for all of them (issue 58: a 27 GB
decoder read its whole file once per sample per model)."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.running import sessions, stream_size, verify
from onnxsurgery.running.feeds import make_inputs
from onnxsurgery.running.batched import batch_dimension, run_samples


def _dense(path, *, pooled: bool = False):
    """x [batch, 64] -> MatMul by a 64 x 64 weight -> Tanh; `pooled`: summed over the batch."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["t"])]
    if pooled:
        nodes.append(helper.make_node("ReduceSum", ["t", "axes"], ["y"], keepdims=0))
        inits = [w, numpy_helper.from_array(np.array([0], np.int64), "axes")]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])
    else:
        nodes.append(helper.make_node("Identity", ["t"], ["y"]))
        inits = [w]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [out], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _samples(*batches, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((b, 64)).astype(np.float32)} for b in batches]


@pytest.fixture
def streamed_everything(monkeypatch):
    monkeypatch.setattr(stream_size, "STREAM_BYTES", 1)


def test_a_streamed_models_samples_run_once_per_model(tmp_path, streamed_everything, run_batches, monkeypatch):
    model = _dense(tmp_path / "m.onnx")
    quantized = tmp_path / "q.onnx"
    onnxsurgery.quant_file(model, quantized, min_elements=1, verify=False)
    samples = _samples(1, 2, 3)
    merged = verify.compare_models(model, quantized, samples=samples)
    assert merged["streamed"] and run_batches == [6, 6]  # the reference's one run, the candidate's one
    run_batches.clear()
    # the errors are those of the samples run one by one (unstreamed: each on its own)
    monkeypatch.setattr(stream_size, "STREAM_BYTES", 1 << 40)
    alone = verify.compare_models(model, quantized, samples=samples)
    assert run_batches == [1, 2, 3, 1, 2, 3]
    assert merged["rel_l2_error"] == pytest.approx(alone["rel_l2_error"], rel=1e-4)
    assert merged["rel_l2_error"] > 0


def test_a_copy_compares_bit_identical_when_batched(tmp_path, streamed_everything, run_batches):
    """Both sides batch alike: a lossless rewrite still compares exact (shrink --verify)."""
    model = _dense(tmp_path / "m.onnx")
    copy = shutil.copy(model, tmp_path / "copy.onnx")
    result = verify.compare_models(model, copy, samples=_samples(2, 1), fold_candidate=False)
    assert result["exact"] and run_batches == [3, 3]


def test_samples_of_other_shapes_and_pooled_outputs_run_one_by_one(tmp_path, streamed_everything, run_batches):
    pooled = _dense(tmp_path / "p.onnx", pooled=True)
    assert batch_dimension(sessions.session(pooled)) is None  # its output is not per sample
    copy = shutil.copy(pooled, tmp_path / "copy.onnx")
    assert verify.compare_models(pooled, copy, samples=_samples(1, 2), fold_candidate=False)["exact"]
    assert run_batches == [1, 2, 1, 2]


def test_run_samples_cuts_each_samples_outputs_back_out(tmp_path):
    sess = sessions.session(_dense(tmp_path / "m.onnx"))
    feeds = _samples(1, 3, 2) + [{"x": np.zeros((2, 32), np.float32)}]  # the last: another shape
    calls = []

    def run(f):
        calls.append(f["x"].shape)
        if f["x"].shape[1] != 64:
            return [f["x"][:, :1]]  # stands in for another model's output: only its shape matters here
        return sess.run(None, f)

    merged = run_samples(feeds, run, merge=True)
    assert calls == [(6, 64), (2, 32)]
    for sample, got in zip(feeds[:3], merged[:3]):
        np.testing.assert_allclose(got[0], sess.run(None, sample)[0], rtol=1e-5, atol=1e-6)
        assert got[0].shape[0] == sample["x"].shape[0]
    assert run_samples(feeds[:3], run, merge=False) and calls[-3:] == [(1, 64), (3, 64), (2, 64)]


def test_generated_samples_run_once_per_model_when_streamed(tmp_path, streamed_everything, run_batches, monkeypatch):
    """Generated inputs: the first sample is not run alone before the batch of 3 that holds it
    (reference_runs._merged_first), and the samples are those the run-alone-first way made: the
    first at seed 0, the batch-2 one at seed 1; given as they are, the figures are the same."""
    model = _dense(tmp_path / "m.onnx")
    quantized = tmp_path / "q.onnx"
    onnxsurgery.quant_file(model, quantized, min_elements=1, verify=False)
    merged = verify.compare_models(model, quantized)
    assert merged["streamed"] and merged["samples"] == 2 and run_batches == [3, 3]
    run_batches.clear()
    sess = sessions.session(model)
    made = [make_inputs(sess, seed=0, model=model), make_inputs(sess, seed=1, model=model, batch=2)]
    given = verify.compare_models(model, quantized, samples=made, layout=False)
    assert run_batches == [3, 3]
    assert merged["rel_l2_error"] == given["rel_l2_error"] and merged["max_abs_error"] == given["max_abs_error"]


def test_samples_run_one_by_one_give_the_heap_back_between_runs(monkeypatch):
    """Run after run, the last run's freed buffers go back to the system before the next (isbnx_det:
    4 pages at 1280x1280, `compare` peaked at 421 MB, 309-323 MB so); the outputs are each sample's."""
    from onnxsurgery.running import batched

    given, order = [], []
    monkeypatch.setattr(batched, "give_back_freed_memory", lambda: given.append(len(order)))
    samples = [{"x": np.full((1, 2), float(i), np.float32)} for i in range(3)]

    def run(feeds):
        order.append(float(feeds["x"][0, 0]))
        return [feeds["x"] * 2]

    outputs = run_samples(samples, run, merge=False)
    assert [float(o[0][0, 0]) for o in outputs] == [0.0, 2.0, 4.0]
    assert given == [1, 2]  # before the second and the third run, never before the first
