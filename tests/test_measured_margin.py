"""With --inputs, a measured choice overrides the data-free one only where it can be told from
rounding luck (issue 55): with too few samples (calibration.MIN_CHOICE_SAMPLES) the choices are
the weights' alone."""

from __future__ import annotations

import numpy as np
import onnx

import builders
import onnxsurgery
from onnxsurgery.quantization.calibration import MIN_CHOICE_SAMPLES, choice_samples

FORM = ("dtype", "granularity", "axis", "symmetric", "lowering", "block_size")


def _plan(tmp_path, model, samples=None):
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    return onnxsurgery.quant_plan(src, min_elements=1024, samples=samples)


def _forms(plan) -> dict:
    return {w["name"]: tuple(w[k] for k in FORM) for w in plan.to_dict()["weights"]}


def test_samples_count_batch_rows():
    assert choice_samples(None) == 0
    assert choice_samples([{"x": np.zeros((1, 3, 8, 8))}] * 2) == 2
    assert choice_samples([{"x": np.zeros((64, 30))}]) == 64  # one batch of 64 rows
    assert choice_samples([{"ids": np.zeros(5, np.int64)}]) == 1


def test_too_few_samples_leave_the_choices_to_the_weights(tmp_path):
    model = builders.outlier_model()
    few = [{"x": builders.rand((1, 256), seed)} for seed in range(MIN_CHOICE_SAMPLES - 1)]
    alone = _plan(tmp_path, model)
    measured = _plan(tmp_path, model, samples=few)
    assert _forms(measured) == _forms(alone)
    assert any("too few to tell" in note for note in measured.notes)
    enough = [{"x": builders.rand((1, 256), seed)} for seed in range(MIN_CHOICE_SAMPLES)]
    assert not any("too few" in note for note in _plan(tmp_path, model, samples=enough).notes)
