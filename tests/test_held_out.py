"""With --inputs, the measured choices are adopted only where they hold on samples they were not
tuned on (issue 55, api/held_out.py): measured on each half of the samples, run on the other
half beside the data-free plan."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.api import held_out
from onnxsurgery.quantization.options import QuantOptions
from onnxsurgery.run_options import Inputs

FORM = ("dtype", "granularity", "axis", "symmetric", "lowering", "block_size")


def _model() -> onnx.ModelProto:
    """Two MatMuls whose weights have outlier blocks (builders.outlier_model's B), any batch."""
    plain = builders.rand((256, 64), 1) * 0.05
    rows, cols = np.indices(plain.shape)
    outlier = plain * np.where(rows // 32 == cols % 8, 40.0, 1.0).astype(np.float32)
    second = builders.rand((64, 256), 3) * np.where(np.indices((64, 256))[1] // 32 == 2, 30.0, 1.0)
    nodes = [helper.make_node("MatMul", ["x", "A"], ["h"]), helper.make_node("MatMul", ["h", "B"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=["N", 256])], [builders.vi("y", shape=["N", 256])],
                          [numpy_helper.from_array(outlier, "A"),
                           numpy_helper.from_array(second.astype(np.float32), "B")])


def _samples(count: int) -> list[dict]:
    out = []
    for seed in range(count):
        x = builders.rand((4, 256), 10 + seed)
        x[:, (seed % 8) * 32:(seed % 8 + 1) * 32] *= 20.0  # each sample its own loud block of inputs
        out.append({"x": x})
    return out


def _forms(plan) -> dict:
    return {w["name"]: tuple(w[k] for k in FORM) for w in plan.to_dict()["weights"]}


def test_halves_are_the_even_and_odd_samples_each_tested_on_the_other():
    assert held_out.folds([0, 1, 2, 3, 4]) == [([0, 2, 4], [1, 3]), ([1, 3], [0, 2, 4])]
    assert held_out.folds([0]) == [] and held_out.folds([]) == []


def test_adopted_by_the_product_of_the_halves_ratios():
    # tumor_vgg16 (its 4 tune phantoms): 3.1x worse on one half, 0.48x on the other (a phantom
    # the data-free plan rounds badly): the sum says adopt, the ratios do not
    assert not held_out.holds([(0.0457, 0.0146), (0.0438, 0.0909)])
    assert held_out.holds([(0.0019, 0.00256), (0.00304, 0.00252)])  # nudenet: 0.74x, 1.21x
    assert not held_out.holds([(0.01, 0.01), (0.02, 0.02)])  # a tie keeps the data-free plan
    assert not held_out.holds([(0.001, 0.0), (0.0, 0.0)])


def test_the_plan_is_the_one_the_check_chose(tmp_path, monkeypatch):
    src = tmp_path / "in.onnx"
    onnx.save(_model(), str(src))
    samples = _samples(4)
    found = held_out.check_measured(src, QuantOptions(min_elements=1024), Inputs(samples=samples))
    assert found.measured is None or found.measured > 0 and found.data_free > 0
    chosen = onnxsurgery.quant_plan(src, min_elements=1024, samples=samples)
    assert found.note in chosen.notes
    free = onnxsurgery.quant_plan(src, min_elements=1024)
    monkeypatch.setattr("onnxsurgery.api.quantizing.check_measured",
                        lambda *a, **k: held_out.HeldOut(True, None, None, "unchecked"))
    measured = onnxsurgery.quant_plan(src, min_elements=1024, samples=samples)
    assert _forms(chosen) == (_forms(measured) if found.adopted else _forms(free))
    if not found.adopted:
        assert "weights alone" in found.note


def test_a_kept_data_free_plan_is_verified_against_the_halves_outputs(tmp_path):
    """Where the data-free plan is kept, quant writes it, and its verification's reference is
    the original's outputs that the halves' captures computed, in the samples' order."""
    src = tmp_path / "in.onnx"
    onnx.save(_model(), str(src))
    samples = _samples(5)
    found = held_out.check_measured(src, QuantOptions(min_elements=1024), Inputs(samples=samples))
    if found.reference is not None:
        names, outputs = found.reference
        assert names == ["y"] and len(outputs) == 5
        import onnxruntime as ort

        sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
        for sample, (y,) in zip(samples, outputs):
            np.testing.assert_allclose(y, sess.run(None, sample)[0], rtol=1e-4, atol=1e-4)
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024, samples=samples)
    assert found.note in report.notes
    assert report.verification["rel_l2_error"] < 0.1


def test_one_sample_is_measured_unchecked(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_model(), str(src))
    found = held_out.check_measured(src, QuantOptions(min_elements=1024), Inputs(samples=_samples(1)))
    assert found.adopted and "not checked" in found.note and "4 rows" in found.note
