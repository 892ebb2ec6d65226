"""The int8 default weighs a weight's error by what reads it (issue 55): float16 for a weight
whose output channels the next layer amplifies unevenly (choices/gain.py, lean.py), and the
axis of a kept weight's scales chosen per weight (choices/channel_axis.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.quantization.choices.lean import SENSITIVE_CONCENTRATION


def conv_chain(spike: float, channels: int = 64, length: int = 40, wide: int = 640) -> onnx.ModelProto:
    """Conv A (64x64x3) -> Relu -> Conv B (64x64x3): B reads A's channel 5 with `spike` times
    the gain of the others (its input slice for that channel scaled up), then a wider Conv C
    (640x64x3: A's float16 bytes fit lean.SENSITIVE_FLOAT16_SHARE of the int8 bytes)."""
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((channels, channels, 3)) * 0.1).astype(np.float32)
    b = (rng.standard_normal((channels, channels, 3)) * 0.1).astype(np.float32)
    b[:, 5, :] *= spike
    c = (rng.standard_normal((wide, channels, 3)) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(w, n) for w, n in ((a, "A"), (b, "B"), (c, "C"))]
    nodes = [helper.make_node("Conv", ["x", "A"], ["a"], pads=[1, 1]), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "B"], ["b"], pads=[1, 1]), helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Conv", ["br", "C"], ["y"], pads=[1, 1])]
    return builders.model(nodes, [builders.vi("x", shape=[1, channels, length])],
                          [builders.vi("y", shape=[1, wide, length])], inits, opset=17)


def _plan(tmp_path, model, **options):
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    plan = onnxsurgery.quant_plan(src, **{"min_elements": 1024, **options})
    return {w.name: w for w in plan.weights}


def test_a_weight_whose_channels_the_next_layer_amplifies_is_stored_as_float16(tmp_path):
    """A's channel 5 is read by B with 20x the gain of the others: A is float16 with the reason
    said; B and C (whose next layers read their channels evenly) stay int8. The written model
    runs in onnxruntime and its output stays close."""
    model = conv_chain(spike=20.0)
    plan = _plan(tmp_path, model)
    assert plan["A"].dtype == "float16" and "next layer" in plan["A"].why
    assert plan["B"].dtype == "int8" and plan["C"].dtype == "int8"
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnxsurgery.quant_file(src, out, min_elements=1024)
    x = builders.rand((1, 64, 40), 7)
    ref, got = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                for p in (src, out))
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05


def test_an_even_next_layer_leaves_the_weight_int8(tmp_path):
    """Without the spike, A stays int8: the rule is the next layer's, not the shape's."""
    plan = _plan(tmp_path, conv_chain(spike=1.0))
    assert plan["A"].dtype == "int8"


def test_the_concentration_threshold_is_what_decides(tmp_path):
    """A spike below SENSITIVE_CONCENTRATION (measured as max/median of B's input-slice norms)
    leaves A int8; above it, float16."""
    below = _plan(tmp_path, conv_chain(spike=SENSITIVE_CONCENTRATION * 0.5))
    assert below["A"].dtype == "int8"


def windowed_basis(rows: int = 64, taps: int = 128) -> np.ndarray:
    """Cos rows under a window tapering to the edges: each tap's range set by the window."""
    t = np.arange(taps)
    window = np.hanning(taps) ** 2 + 1e-3
    freqs = np.arange(rows)[:, None]
    return (np.cos(2 * np.pi * freqs * t[None, :] / taps) * window[None, :]).astype(np.float32)[:, None, :]


def test_a_kept_weight_takes_its_scales_along_the_axis_that_loses_least(tmp_path):
    """A one-input-channel Conv basis (64x1x128, windowed cos rows) kept quantized in memory
    (--memory below its float weights, so every weight stays DequantizeLinear): per tap (axis
    2) its error is lower than per output row, so the plan scales along axis 2 and says why; the
    file runs and computes what the original does within the reported error."""
    basis = windowed_basis()
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], strides=[64])]
    model = builders.model(nodes, [builders.vi("x", shape=[1, 1, 1024])], [builders.vi("y", shape=[1, 64, None])],
                           [numpy_helper.from_array(basis, "W")], opset=17)
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    plan = {w.name: w for w in onnxsurgery.quant_plan(src, min_elements=1024, memory=1000).weights}
    assert plan["W"].lowering == "dq" and plan["W"].axis == 2 and "axis 2" in plan["W"].why
    rows = tmp_path / "rows.onnx"
    onnxsurgery.quant_file(src, out, min_elements=1024, memory=1000)
    onnxsurgery.quant_file(src, rows, min_elements=1024, memory=1000, granularity="channel")
    per_row = {w.name: w for w in onnxsurgery.quant_plan(src, min_elements=1024, memory=1000,
                                                          granularity="channel").weights}
    assert per_row["W"].axis == 0  # asked for per channel: the reader's output channel, as before
    x = builders.rand((1, 1, 1024), 3)
    ref, by_tap, by_row = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                           for p in (src, out, rows))
    error = lambda got: np.linalg.norm(got - ref) / np.linalg.norm(ref)  # noqa: E731
    assert error(by_tap) < 0.02 and error(by_tap) < error(by_row)


def test_a_lean_conv_weight_that_loses_less_along_another_axis_is_kept_along_it(tmp_path):
    """The same kind of basis (128x1x256) where the memory rule keeps nothing (a gathered table
    beside it saves more than the lean form adds): its lean form can only scale per output row,
    DequantizeLinear per tap loses less, so the default plan takes that (channel_axis.
    lean_axis_free) and says why; the file computes what the original does, closer than the
    lean form asked for with --lowering scaled."""
    basis = windowed_basis(rows=128, taps=256)
    table = builders.rand((4096, 64), 4) * 0.1
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], strides=[128]),
             helper.make_node("Gather", ["T", "ids"], ["t"])]
    model = builders.model(nodes, [builders.vi("x", shape=[1, 1, 2048]), builders.vi("ids", TensorProto.INT64, [1, 8])],
                           [builders.vi("y", shape=[1, 128, None]), builders.vi("t", shape=[1, 8, 64])],
                           [numpy_helper.from_array(basis, "W"), numpy_helper.from_array(table, "T")], opset=17)
    src, out, lean = tmp_path / "in.onnx", tmp_path / "q.onnx", tmp_path / "lean.onnx"
    onnx.save(model, str(src))
    plan = {w.name: w for w in onnxsurgery.quant_plan(src).weights}
    assert plan["T"].lowering == "gather"
    assert plan["W"].lowering == "dq" and plan["W"].axis == 2 and "not the lean form" in plan["W"].why, plan["W"]
    onnxsurgery.quant_file(src, out)
    onnxsurgery.quant_file(src, lean, lowering="scaled")
    feeds = {"x": builders.rand((1, 1, 2048), 5), "ids": np.arange(8, dtype=np.int64)[None, :]}
    ref, by_tap, by_row = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(["y"], feeds)[0]
                           for p in (src, out, lean))
    error = lambda got: np.linalg.norm(got - ref) / np.linalg.norm(ref)  # noqa: E731
    assert error(by_tap) < 0.02 and error(by_tap) < error(by_row)


def test_slice_norms_a_few_channels_at_a_time_are_the_whole_arrays_sums():
    """gain.slice_norms sums each channel's squares in float64 a slice of channels at a time:
    the same bits as the sums over the whole array in one go, along any axis, for float32 and
    float16 weights, a channel count no multiple of the slice included."""
    from onnxsurgery.quantization.choices.gain import NORM_CHANNELS, slice_norms

    rng = np.random.default_rng(5)
    for shape in ((NORM_CHANNELS * 2 + 3, 70), (64, NORM_CHANNELS + 1, 3), (5, 7)):
        for dtype in (np.float32, np.float16):
            values = rng.standard_normal(shape).astype(dtype)
            for axis in range(values.ndim):
                whole = values.astype(np.float64)
                expected = np.sqrt((np.moveaxis(whole, axis, 0).reshape(values.shape[axis], -1) ** 2).sum(1))
                assert slice_norms(values, axis).tobytes() == expected.tobytes(), (shape, dtype, axis)
