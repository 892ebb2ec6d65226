"""A lean Conv weight with a long kernel (16 taps or more) whose filters share an envelope along
their taps takes one scale per tap, as a Cast -> Sub -> Mul chain folded at load, where that loses
at most TAP_AXIS_MARGIN of its lean forms' error (choices/tap_axis.py): crepe's 64-tap
convolutions, which onnx-shrink-ray scales per tap. Filters without an envelope, and 3-tap
kernels, keep their lean form."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnxsurgery

import builders


def filters(taps: int, envelope: bool) -> np.ndarray:
    """32 x 16 x taps x 1 filters, under a window that tapers their taps to near zero at both ends
    where `envelope` (per output channel, the large middle taps set each scale)."""
    w = builders.rand((32, 16, taps, 1), 0) * 0.05
    return w * (np.hanning(taps + 2)[1:-1, None] ** 2).astype(np.float32) if envelope else w


def save(tmp_path, w: np.ndarray) -> str:
    model = builders.model([helper.make_node("Conv", ["x", "W"], ["y"])],
                           [builders.vi("x", shape=[1, 16, 256, 1])], [builders.vi("y", shape=[1, 32, None, 1])],
                           [numpy_helper.from_array(w, "W")], opset=17)
    src = tmp_path / f"conv{w.shape[2]}.onnx"
    onnx.save(model, str(src))
    return src


def test_a_long_kernel_under_an_envelope_takes_a_scale_per_tap(tmp_path):
    src = save(tmp_path, filters(64, envelope=True))
    (w,) = onnxsurgery.quant_plan(src).weights
    assert (w.lowering, w.granularity, w.axis, w.symmetric) == ("arith", "channel", 2, False), w
    assert "per tap" in w.why and "tap_axis" in w.why
    builders.quantized_within(src, tmp_path / "q.onnx", {"x": builders.rand((1, 16, 256, 1), 3)}, 0.02)


def test_filters_without_an_envelope_keep_their_lean_form(tmp_path):
    (w,) = onnxsurgery.quant_plan(save(tmp_path, filters(64, envelope=False))).weights
    assert w.lowering in ("scaled", "scaled_input") and "per tap" not in w.why, w


def test_a_short_kernel_has_no_tap_axis(tmp_path):
    (w,) = onnxsurgery.quant_plan(save(tmp_path, filters(8, envelope=True)), min_elements=1024).weights
    assert "per tap" not in w.why and w.axis != 2, w
