"""Verification's extra samples within docs/memory.md's slack (running/batch_budget.py): a model
whose one sample's activations are large relative to its weights runs its batch-2 sample apart
from the first (a streamed model's batch of 3 split), or not at all; a small one merges as before."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.running import batch_budget, stream_size, verify


def _conv(path, size: int = 64, channels: int = 16, bias: bool = False):
    """x [batch, channels, size, size] -> 1x1 Conv (channels x channels) -> Tanh: activations of
    channels x size^2 floats a sample, weights of channels^2; `bias`: plus a constant of the
    activation's size (a weight as large as an activation)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((channels, channels, 1, 1))
                                .astype(np.float32) / channels, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], kernel_shape=[1, 1]), helper.make_node("Tanh", ["h"], ["y"])]
    weights = [w]
    if bias:
        nodes[1:1] = [helper.make_node("Add", ["h", "b"], ["hb"])]
        nodes[-1].input[0] = "hb"
        weights.append(numpy_helper.from_array(np.full((1, channels, size, size), 0.5, np.float32), "b"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", channels, size, size])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _ones(shape):
    return {"x": np.broadcast_to(np.zeros((), np.float32), shape)}  # shapes only: nothing allocated


def test_weights_as_large_keep_the_extra_sample(tmp_path, monkeypatch):
    """The weights' room in the bound (8x the largest tensor) counts: 256 KiB activations beside a
    256 KiB weight fit where beside 1 KiB of weights they do not."""
    monkeypatch.setattr(batch_budget, "EXTRA_BUDGET", 256 << 10)
    lean = _conv(tmp_path / "lean.onnx")
    heavy = _conv(tmp_path / "heavy.onnx", bias=True)
    assert batch_budget.largest_weight(heavy) == 256 << 10 and batch_budget.largest_weight(lean) == 1 << 10
    assert not batch_budget.extra_samples_fit(lean, _ones((1, 16, 64, 64)), 1)
    assert batch_budget.extra_samples_fit(heavy, _ones((1, 16, 64, 64)), 2)


def test_the_rule_from_shapes(tmp_path):
    # 16 x 1024 x 1024 floats: 64 MiB a sample, held twice, is the whole 128 MiB slack
    big = _conv(tmp_path / "big.onnx", size=1024)
    assert batch_budget.extra_samples_fit(big, _ones((1, 16, 1024, 1024)), 1)
    assert not batch_budget.extra_samples_fit(big, _ones((1, 16, 1024, 1024)), 2)
    larger = _conv(tmp_path / "larger.onnx", size=1024, channels=32)  # 128 MiB a sample
    assert not batch_budget.extra_samples_fit(larger, _ones((1, 32, 1024, 1024)), 1)
    small = _conv(tmp_path / "small.onnx")  # 256 KiB a sample: merging stays
    assert batch_budget.extra_samples_fit(small, _ones((1, 16, 64, 64)), 2)
    assert batch_budget.extra_samples_fit(onnx.load(str(larger)), _ones((1, 32, 1024, 1024)), 1)  # not a path


@pytest.mark.parametrize("budget, expected, samples", [
    (8 << 20, [3, 3], 2),  # 256 KiB a sample: the batch of 3, on both sides (batched.py)
    # two extra samples past it: the first and the batch-2 sample apart (which the candidate, the
    # same readers, then leaves out: readers.py, as for a model not streamed)
    (768 << 10, [1, 2, 1], 1),
    (256 << 10, [1, 1], 1),  # even one past it: no batch-2 sample
])
def test_a_streamed_batch_of_three_within_the_budget(tmp_path, monkeypatch, run_batches, budget, expected, samples):
    monkeypatch.setattr(stream_size, "STREAM_BYTES", 1)
    monkeypatch.setattr(batch_budget, "EXTRA_BUDGET", budget)
    model = _conv(tmp_path / "m.onnx")
    other = shutil.copy(model, tmp_path / "copy.onnx")
    report = verify.compare_models(model, other, fold_candidate=False)
    assert report["streamed"] and report["samples"] == samples and report["exact"]
    assert run_batches == expected


def test_an_unstreamed_batch_two_sample_within_the_budget(tmp_path, monkeypatch, run_batches):
    model = _conv(tmp_path / "m.onnx")
    other = shutil.copy(model, tmp_path / "copy.onnx")
    verify.compare_models(model, other, fold_candidate=False)
    assert run_batches == [1, 2, 1]  # the reference's batch-2 run; the candidate's left out (readers.py)
    run_batches.clear()
    monkeypatch.setattr(batch_budget, "EXTRA_BUDGET", 256 << 10)
    report = verify.compare_models(model, other, fold_candidate=False)
    assert report["samples"] == 1 and run_batches == [1, 1]
