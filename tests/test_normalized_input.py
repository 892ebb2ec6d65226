"""A Conv weight the memory rule keeps takes its lean form's integers (`dq_equalized`) where its
reader takes a normalization's output (choices/normalized_input.py), plain `dq` elsewhere."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from conftest import run


def _normed_convs(normalized: bool, channels: int = 256) -> onnx.ModelProto:
    """x -> [(x - mean over channels) * gamma + beta, as jax2tf writes a LayerNorm] -> Conv W0 -> Relu
    -> Conv W1 -> Relu: two 3x3 Convs, of which the memory rule keeps one (W0, read first)."""
    inits = [numpy_helper.from_array(builders.rand((channels, channels, 3, 3), 40 + i) * 0.05, f"W{i}")
             for i in range(2)]
    inits += [numpy_helper.from_array(builders.rand((1, channels, 1, 1), 7) + 1.0, "gamma"),
              numpy_helper.from_array(builders.rand((1, channels, 1, 1), 8) * 0.1, "beta")]
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1]),
             helper.make_node("Sub", ["x", "mean"], ["centred"]),
             helper.make_node("Mul", ["centred", "gamma"], ["scaled"]),
             helper.make_node("Add", ["scaled", "beta"], ["normed"]) if normalized else
             helper.make_node("Relu", ["scaled"], ["normed"]),
             helper.make_node("Conv", ["normed", "W0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[1, channels, 8, 8])],
                          [builders.vi("y", shape=[1, channels, 8, 8])], inits, opset=12)


def test_a_kept_conv_behind_a_normalization_takes_the_lean_integers(tmp_path):
    model = _normed_convs(normalized=True)
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out)
    records = {w["name"]: w for w in report.weights}
    assert records["W0"]["lowering"] == "dq_equalized" and "normalization" in records["W0"]["why"]
    assert records["W1"]["lowering"] != "dq_equalized"  # behind a Relu: not kept, or kept plain
    feeds = builders.feeds_for(model)
    (a,), (b,) = run(model, feeds), run(out, feeds)
    assert 0 < np.linalg.norm(b - a) / np.linalg.norm(a) < 0.02


def test_not_behind_an_activation():
    import onnx_graphsurgeon as gs

    from onnxsurgery.graph_utils import collect_constants, iter_scopes
    from onnxsurgery.quantization.choices.normalized_input import reads_normalized

    for normalized, expected in ((True, {"W0": True, "W1": False}), (False, {"W0": False, "W1": False})):
        graph = gs.import_onnx(_normed_convs(normalized, channels=8))
        sites = {s.name: s for s in collect_constants(graph, list(iter_scopes(graph)))}
        assert {n: reads_normalized(sites[n]) for n in ("W0", "W1")} == expected
