"""quantization/shared_rounding.py: a weight rounded one way once per --inputs check, shared by
the two plans and builds (issue 58, measured14), taken only for equal values."""

from __future__ import annotations

import json

import numpy as np
import onnx

import builders
import onnxsurgery
from onnxsurgery.quantization import shared_rounding
from onnxsurgery.quantization.rounding import quantize
from onnxsurgery.quantization.shared_rounding import rounded, sharing
from test_measured_or_free import _lossy_model


def test_equal_values_share_a_rounding_and_others_do_not():
    values = builders.rand((64, 32), 1)
    made = []

    def make(x):
        return lambda: made.append(1) or quantize(x, axis=0, balanced=True)

    args = {"dtype": "int8", "symmetric": True}
    first = rounded("W", values, None, ("way",), args, make(values))
    assert len(made) == 1 and rounded("W", values.copy(), None, ("way",), args, make(values)) is not first
    assert len(made) == 2  # outside `sharing`: made each time
    with sharing(1 << 20):
        a = rounded("W", values, None, ("way",), args, make(values))
        b = rounded("W", values.copy(), None, ("way",), args, make(values))  # another array, the same values
        assert len(made) == 3 and b is not a and b.q is a.q
        other = values.copy()
        other[5, 7] += 1.0  # the same name, shape and arguments, other values: its own rounding
        c = rounded("W", other, None, ("way",), args, make(other))
        assert len(made) == 4 and not np.array_equal(c.q, a.q)
        rounded("W", values, None, ("other way",), args, make(values))
        rounded("W", values, np.ones(32, np.float32), ("way",), args, make(values))  # divided first
        assert len(made) == 6
    rounded("W", values, None, ("way",), args, make(values))
    assert len(made) == 7 and not shared_rounding._KEPT  # dropped when `sharing` closed


def test_the_check_writes_the_same_file_and_report_with_and_without_sharing(tmp_path, monkeypatch):
    model = _lossy_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    samples = [builders.feeds_for(model, seed) for seed in range(3)]
    calls = []
    keep = shared_rounding.rounded

    def counted(name, values, divisor, way, args, make):
        return keep(name, values, divisor, way, args, lambda: calls.append(name) or make())

    monkeypatch.setattr("onnxsurgery.quantization.quantize.rounded", counted)
    shared = onnxsurgery.quant_file(src, tmp_path / "shared.onnx", min_elements=1024, samples=samples)
    made_shared = len(calls)
    monkeypatch.setattr("onnxsurgery.api.measured_or_free.SHARED_ROUNDING_BYTES", 0)  # nothing kept
    calls.clear()
    alone = onnxsurgery.quant_file(src, tmp_path / "alone.onnx", min_elements=1024, samples=samples)
    assert made_shared < len(calls)  # roundings the plans and builds repeated, made once
    assert (tmp_path / "shared.onnx").read_bytes() == (tmp_path / "alone.onnx").read_bytes()

    def comparable(report):
        found = report.to_dict() if hasattr(report, "to_dict") else dict(vars(report))
        found.pop("output", None)
        return json.dumps(found, sort_keys=True, default=str)

    assert comparable(shared) == comparable(alone)
