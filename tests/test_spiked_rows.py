"""The int8 default stores as float16 a weight whose output channels are each mostly one weight
(choices/spiked_rows.py, lean.py's SPIKED_* stage; issue 55, u2netp's "2258"), from the weights
alone, while larger Convs beside it compete for the accurate chain's budget."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.quantization.choices.spiked_rows import MIN_ROW_ELEMENTS, SPIKE_SHARE, spike_share


def spiked_net(spike: float) -> onnx.ModelProto:
    """S (64x32x3x3): every output channel holds `spike` at input channel 14's centre tap, the rest
    N(0, 0.05) (a BatchNorm folded over a quiet input channel); then two larger Convs, L1
    (128x64x3x3) and L2 (128x128x3x3), whose chains the budget could pay for instead."""
    rng = np.random.default_rng(0)
    s = (rng.standard_normal((64, 32, 3, 3)) * 0.05).astype(np.float32)
    s[:, 14, 1, 1] = -spike * (1 + rng.random(64)).astype(np.float32)
    l1 = (rng.standard_normal((128, 64, 3, 3)) * 0.05).astype(np.float32)
    l2 = (rng.standard_normal((128, 128, 3, 3)) * 0.05).astype(np.float32)
    inits = [numpy_helper.from_array(w, n) for w, n in ((s, "S"), (l1, "L1"), (l2, "L2"))]
    pads = [1, 1, 1, 1]
    nodes = [helper.make_node("Conv", ["x", "S"], ["s"], pads=pads), helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("Conv", ["sr", "L1"], ["a"], pads=pads), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "L2"], ["y"], pads=pads)]
    return builders.model(nodes, [builders.vi("x", shape=[1, 32, 12, 12])],
                          [builders.vi("y", shape=[1, 128, 12, 12])], inits, opset=17)


def _plan(tmp_path, model):
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    return {w.name: w for w in onnxsurgery.quant_plan(src, min_elements=1024).weights}


def test_a_weight_whose_channels_are_one_spike_each_is_stored_as_float16(tmp_path):
    """S's channels are each >90% one weight: S is float16 with the reason said; the larger Convs
    stay int8. The written model loads in onnxruntime and computes close to the original."""
    plan = _plan(tmp_path, spiked_net(spike=3.0))
    assert plan["S"].dtype == "float16" and "one weight holds" in plan["S"].why
    assert plan["L1"].dtype == "int8" and plan["L2"].dtype == "int8"
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnxsurgery.quant_file(src, out, min_elements=1024)
    x = builders.rand((1, 32, 12, 12), 3)
    ref, got = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                for p in (src, out))
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05


def test_without_the_spikes_the_weight_stays_int8(tmp_path):
    """The same S with its spikes the size of its other weights: int8, the rule is the spikes'."""
    plan = _plan(tmp_path, spiked_net(spike=0.05))
    assert plan["S"].dtype == "int8"


def test_spike_share_is_the_median_channels_and_skips_short_channels():
    """spike_share: the median channel's share of its largest weight (all-zero channels left out);
    channels under MIN_ROW_ELEMENTS weights (a depthwise kernel's few taps) count 0."""
    w = np.full((4, 8, 3, 3), 0.01, np.float32)
    w[:3, 2, 1, 1] = 1.0  # three of four channels spiked
    w[3] = 0.0  # an all-zero channel is not counted
    share = spike_share(w, 0)
    assert share >= SPIKE_SHARE
    w[1:, 2, 1, 1] = 0.01  # now only one channel of three non-zero spiked: the median is not
    assert spike_share(w, 0) < SPIKE_SHARE
    depthwise = np.zeros((16, 1, 3, 3), np.float32)
    depthwise[:, 0, 1, 1] = 1.0
    assert 9 < MIN_ROW_ELEMENTS and spike_share(depthwise, 0) == 0.0
