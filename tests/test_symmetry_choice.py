"""`--symmetric` left to quant: each weight keeps whichever of symmetric and asymmetric gives the
smaller error in its layer's output (quantization/choices/symmetry.py). Built so that each way wins
once: a lopsided weight (all values positive) wastes half the symmetric levels; a weight that
already sits on a symmetric 4-bit grid (as after quantization-aware training) is exact
symmetric and not asymmetric, whose 15 steps span min to max. Each output reads one weight, so
the default must do at least as well as the better forced choice output by output, in
onnxruntime. Then the clipping search weighted by the layer's input (gptq.input_energy)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from conftest import run

TOKENS, K, N = 16, 256, 64


def _two_weights() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    lopsided = (rng.uniform(0.0, 1.0, (K, N)) / np.sqrt(K)).astype(np.float32)
    grid = rng.integers(-7, 8, (K, N)).astype(np.float32)
    grid[::32] = 7  # every block of 32 reaches the grid's end: its symmetric scale is the grid step
    on_grid = (grid * rng.uniform(0.5, 2.0, (1, N)) / (7 * np.sqrt(K))).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W_lopsided"], ["y_lopsided"]),
             helper.make_node("MatMul", ["x", "W_grid"], ["y_grid"])]
    inits = [numpy_helper.from_array(lopsided, "W_lopsided"), numpy_helper.from_array(on_grid, "W_grid")]
    return builders.model(nodes, [builders.vi("x", shape=[TOKENS, K])],
                          [builders.vi("y_lopsided", shape=[TOKENS, N]), builders.vi("y_grid", shape=[TOKENS, N])],
                          inits, opset=21, ir=10)


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
def test_each_weight_keeps_the_more_accurate_symmetry(tmp_path, dtype):
    model = _two_weights()
    src = tmp_path / "two.onnx"
    onnx.save(model, str(src))
    feeds = {"x": builders.rand((TOKENS, K), 11)}
    refs = run(model, feeds)
    errors, chosen = {}, None
    for label, symmetric in (("auto", None), ("sym", True), ("asym", False)):
        out = tmp_path / f"{label}.onnx"
        report = onnxsurgery.quant_file(src, out, dtype=dtype, symmetric=symmetric, samples=[feeds], min_elements=1024)
        if symmetric is None:
            chosen = report.pass_report("quantize").details["symmetric_chosen"]
        errors[label] = [float(np.linalg.norm(g - r) / np.linalg.norm(r)) for g, r in zip(run(out, feeds), refs)]
    assert chosen == ["W_grid"], (chosen, errors)
    for output in range(2):  # the default is at least the better of the two, output by output
        # (at most: its clipping search is weighted by the layer's input, the forced ones' is not)
        assert errors["auto"][output] <= min(errors["sym"][output], errors["asym"][output]) * (1 + 1e-6), errors
    assert errors["sym"][0] > errors["asym"][0] and errors["asym"][1] > errors["sym"][1], errors


def test_explicit_symmetry_is_not_second_guessed(tmp_path):
    src = tmp_path / "two.onnx"
    onnx.save(_two_weights(), str(src))
    for symmetric in (True, False):
        report = onnxsurgery.quant_file(src, tmp_path / "out.onnx", dtype="int4", symmetric=symmetric,
                                        min_elements=1024, verify=False)
        details = report.pass_report("quantize").details
        assert details["symmetric_chosen"] == []
        assert all(("/sym/" in s) == symmetric for s in details["schemes"]), details["schemes"]


def test_input_energy_lays_out_the_diagonal_as_the_weight():
    from onnxsurgery.quantization.gptq import input_energy

    d = np.arange(1, 25, dtype=np.float64)
    matmul = input_energy(np.diag(d[:6]), (6, 4), channel_axis=1, block_axis=0)
    assert matmul.shape == (6, 1) and matmul[:, 0].tolist() == d[:6].tolist()
    conv = input_energy(np.diag(d), (5, 6, 2, 2), channel_axis=0, block_axis=1)  # columns: [kh, kw, C]
    assert conv.shape == (1, 6, 2, 2)
    assert all(conv[0, c, i, j] == d[(i * 2 + j) * 6 + c] for c in range(6) for i in range(2) for j in range(2))


def test_weighted_clipping_trades_an_unread_outlier_for_finer_steps():
    """Row 3 of the weight meets an input that is nearly always 0: its outlier costs the layer
    little, and clipping it gives every other row of its block finer steps."""
    from onnxsurgery.quantization.rounding import quantize

    rng = np.random.default_rng(0)
    w = rng.normal(size=(64, 16)).astype(np.float32)
    w[3] *= 8
    importance = np.ones((64, 1), np.float32)
    importance[3] = 1e-4

    def layer_error(qt):
        return float((importance * (qt.dequantize() - w) ** 2).sum())

    args = dict(dtype="int4", granularity="block", axis=0, block_size=32, symmetric=False)
    weighted = layer_error(quantize(w, search_clip=True, importance=importance, **args))
    assert weighted < 0.8 * layer_error(quantize(w, **args))
    assert weighted < 0.8 * layer_error(quantize(w, search_clip=True, **args))


def test_int4_clipping_without_inputs_is_weighted_by_what_a_layer_norm_feeds(tmp_path):
    """Without --inputs, a 4-bit MatMul weight that reads a LayerNormalization's output weights
    its clipping search by gamma^2 + beta^2 per input channel (a normalized token's channel mean
    square); one that reads anything else is searched unweighted."""
    import onnx_graphsurgeon as gs

    from onnxsurgery.graph_utils import collect_constants
    from onnxsurgery.quantization.choices.symmetry import normalized_input_energy

    gamma = np.linspace(0.1, 3.0, 64).astype(np.float32)
    beta = np.full(64, 0.5, np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "W1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W2"], ["y"])]
    inits = [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta"),
             numpy_helper.from_array(builders.rand((64, 64), 1), "W1"),
             numpy_helper.from_array(builders.rand((64, 64), 2), "W2")]
    # the Relu's output a graph output too: onnxruntime then fuses W1 (read by a Relu alone, it would
    # await a QuantizeLinear and stay unfused, and --dtype int4 would leave it int8: nbits_fusion.py)
    model = builders.model(nodes, [builders.vi("x", shape=[4, 64])],
                           [builders.vi("y", shape=[4, 64]), builders.vi("r", shape=[4, 64])], inits)
    sites = {s.name: s for s in collect_constants(gs.import_onnx(model))}
    np.testing.assert_allclose(normalized_input_energy(sites["W1"]), gamma ** 2 + beta ** 2)
    assert normalized_input_energy(sites["W2"]) is None  # a Relu's output: the weights do not say
    onnx.save(model, str(tmp_path / "in.onnx"))
    plan = onnxsurgery.quant_plan(tmp_path / "in.onnx", dtype="int4", min_elements=1024)
    assert set(plan.importance) == {"W1"} and plan.importance["W1"].shape == (64, 1)


def test_a_clear_call_on_a_few_channels_stands_and_the_why_says_so(tmp_path, monkeypatch):
    """A weight large enough is measured first on QUICK_ELEMENTS of it (choices/symmetry.py):
    a clear call there decides, the same as measured whole, and the plan's `why` says it was a
    sample; with the quick sample switched off, every decision and record but the `why` is the
    same."""
    from onnxsurgery.quantization.choices import symmetry

    rows, columns = 1024, 256  # 128 channels of 256 measured first
    rng = np.random.default_rng(5)
    lopsided = (rng.uniform(0.0, 1.0, (rows, columns)) / np.sqrt(rows)).astype(np.float32)
    grid = rng.integers(-7, 8, (rows, columns)).astype(np.float32)
    grid[::32] = 7
    on_grid = (grid * rng.uniform(0.5, 2.0, (1, columns)) / (7 * np.sqrt(rows))).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W_lopsided"], ["y_lopsided"]),
             helper.make_node("MatMul", ["x", "W_grid"], ["y_grid"])]
    inits = [numpy_helper.from_array(lopsided, "W_lopsided"), numpy_helper.from_array(on_grid, "W_grid")]
    model = builders.model(nodes, [builders.vi("x", shape=[TOKENS, rows])],
                           [builders.vi("y_lopsided", shape=[TOKENS, columns]),
                            builders.vi("y_grid", shape=[TOKENS, columns])], inits, opset=21, ir=10)
    src = tmp_path / "two.onnx"
    onnx.save(model, str(src))
    feeds = [{"x": builders.rand((TOKENS, rows), 11)}]
    quick = onnxsurgery.quant_plan(src, dtype="int4", samples=feeds)
    assert [w.name for w in quick.weights if w.symmetric] == ["W_grid"]
    assert all(w.why.endswith("; symmetry measured on 128 of 256 channels") for w in quick.weights), \
        [w.why for w in quick.weights]
    onnxsurgery.quant_file(src, tmp_path / "quick.onnx", dtype="int4", samples=feeds, verify=False)
    monkeypatch.setattr(symmetry, "QUICK_ELEMENTS", 1 << 30)
    whole = onnxsurgery.quant_plan(src, dtype="int4", samples=feeds)
    # the pass searches the whole weight where the plan measured a sample (picks of the sample
    # reused: quantize.quantize_site's sample_of): the same file
    onnxsurgery.quant_file(src, tmp_path / "whole.onnx", dtype="int4", samples=feeds, verify=False)
    assert (tmp_path / "quick.onnx").read_bytes() == (tmp_path / "whole.onnx").read_bytes()
    assert all("measured on" not in w.why for w in whole.weights)

    def records(plan):
        return [{**vars(w), "why": w.why.split("; symmetry measured")[0]} for w in plan.weights]

    assert records(quick) == records(whole)
