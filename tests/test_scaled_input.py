"""The lean per-input-channel Conv form (lowerings/scaled_input.py) and where auto takes it
(channel_axis.input_form_free): a Conv with few output channels and many input channels of
their own ranges and offsets, which one scale per output channel serves worst."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import onnxsurgery
import builders


def _wide_conv() -> tuple[onnx.ModelProto, np.ndarray]:
    """64 taps, as crepe's: the memory rule keeps no such Conv (load_memory.KEPT_CONV_TAPS)."""
    rng = np.random.default_rng(0)
    rows = np.logspace(-2, 0, 128)[None, :, None, None]
    w = (rng.standard_normal((16, 128, 64, 1)) * 0.3 + rng.standard_normal((1, 128, 1, 1))) * rows
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[32, 0, 31, 0])]
    b = rng.standard_normal(16).astype(np.float32)
    model = builders.model(nodes, [builders.vi("x", shape=[1, 128, 40, 1])], [builders.vi("y", shape=[1, 16, 40, 1])],
                           [numpy_helper.from_array(w.astype(np.float32), "W"), numpy_helper.from_array(b, "B")],
                           opset=17)
    return model, w


def _run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _feed() -> np.ndarray:
    return np.abs(np.random.default_rng(1).standard_normal((1, 128, 40, 1))).astype(np.float32)


def test_auto_takes_the_input_channels_lean_where_they_lose_least(tmp_path):
    model, w = _wide_conv()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "auto.onnx", min_elements=1024)
    (record,) = [r for r in report.weights if r["name"] == "W"]
    assert (record["lowering"], record["granularity"], record["axis"]) == ("scaled_input", "channel", 1)
    assert record["symmetric"] is False and "per input channel (128)" in record["why"]
    out = onnx.load(str(tmp_path / "auto.onnx"))
    assert not [n for n in out.graph.node if n.op_type == "DequantizeLinear"]  # lean: nothing dequantized at run time
    ref, lean = _run(src, _feed()), _run(tmp_path / "auto.onnx", _feed())
    assert np.linalg.norm(lean - ref) / np.linalg.norm(ref) < 0.01


def test_the_lean_form_equals_dequantize_linear_along_the_input_channels(tmp_path):
    """The same integers as DequantizeLinear along axis 1 before the Conv: the same outputs, with
    zero points (their term) and without."""
    model, _ = _wide_conv()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    outs = {}
    for lowering in ("scaled_input", "dq"):
        for symmetric in (False, True):
            record = {"name": "W", "dtype": "int8", "granularity": "channel", "axis": 1, "symmetric": symmetric,
                      "lowering": lowering, "block_size": None, "rounding": "nearest", "levels": None}
            plan = tmp_path / f"{lowering}{symmetric}.json"
            plan.write_text(json.dumps({"version": 1, "opset": 17, "target": "any", "weights": [record]}))
            dst = tmp_path / f"{lowering}{symmetric}.onnx"
            onnxsurgery.quant_file(src, dst, plan=plan, verify=False)
            outs[lowering, symmetric] = _run(dst, _feed())
    for symmetric in (False, True):
        a, b = outs["scaled_input", symmetric], outs["dq", symmetric]
        assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max()
