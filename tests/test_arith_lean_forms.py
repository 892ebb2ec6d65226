"""A float16 convolution's lean form (`arith`, folded at load: no scale can follow a float16
reader) with zero points where they measure more accurate, and its scales along the input
channels where they lose ARITH_AXIS_MARGIN less (lean.py, zero_points.ARITH_ZERO_POINT_READERS):
a grouped Conv's, which takes no input-side scale. A one-group Conv's is `arith_equalized`
(storage11): per output channel, its input rows equalized, which serves uneven rows better."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import onnxsurgery
import builders


def _float16_conv(rows_differ: bool, group: int = 2) -> onnx.ModelProto:
    """A float16 1-D Conv (as slovorez's) whose output channels sit on offsets; where `rows_differ`,
    its input channels differ in range by 100x, so scales per input channel lose less."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 64, 1, 5)) * 0.05 + rng.standard_normal((48, 1, 1, 1)) * 0.1
    if rows_differ:
        w = w * np.logspace(-2, 0, 64)[None, :, None, None]
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], pads=[0, 2, 0, 2], group=group)]
    f16 = onnx.TensorProto.FLOAT16
    return builders.model(nodes, [builders.vi("x", f16, [1, 64 * group, 1, 40])],
                          [builders.vi("y", f16, [1, 48, 1, 40])], [numpy_helper.from_array(w.astype(np.float16), "W")],
                          opset=17)


def _plan_and_error(tmp_path, rows_differ: bool, group: int = 2, plan=None) -> tuple[dict, float]:
    src = tmp_path / "in.onnx"
    onnx.save(_float16_conv(rows_differ, group), str(src))
    options = {"plan": plan} if plan is not None else {"min_elements": 1024}
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", **options)
    (record,) = [w for w in report.weights if w["name"] == "W"]
    x = {"x": np.random.default_rng(1).standard_normal((1, 64 * group, 1, 40)).astype(np.float16)}
    ref, out = (ort.InferenceSession(str(p)).run(None, x)[0].astype(np.float32) for p in (src, tmp_path / "q.onnx"))
    return record, float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def test_a_float16_convs_lean_form_takes_zero_points(tmp_path):
    record, error = _plan_and_error(tmp_path, rows_differ=False)
    assert (record["lowering"], record["granularity"], record["axis"]) == ("arith", "channel", 0)
    assert record["symmetric"] is False and "zero points" in record["why"]
    assert error < 0.01


def test_a_float16_convs_lean_form_takes_the_input_channels_where_they_lose_less(tmp_path):
    record, error = _plan_and_error(tmp_path, rows_differ=True)
    assert (record["lowering"], record["granularity"], record["axis"]) == ("arith", "channel", 1)
    assert record["symmetric"] is False and "scales along axis 1 (64)" in record["why"]
    assert error < 0.01


def test_a_one_group_float16_convs_lean_form_is_equalized(tmp_path):
    record, error = _plan_and_error(tmp_path, rows_differ=True, group=1)
    assert (record["lowering"], record["granularity"], record["axis"]) == ("arith_equalized", "channel", 0)
    assert record["symmetric"] is False and "zero points" in record["why"]
    # the grouped Conv's rule on the same weight (main's form for it: scales per input channel)
    plan = onnxsurgery.quant_plan(tmp_path / "in.onnx", min_elements=1024).to_dict()
    plan["weights"] = [{**w, "lowering": "arith", "axis": 1} if w["name"] == "W" else w for w in plan["weights"]]
    _, per_input_channel = _plan_and_error(tmp_path, rows_differ=True, group=1, plan=plan)
    assert error < 0.8 * per_input_channel
