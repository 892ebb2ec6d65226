"""A small Gemm read with transB whose output a normalization takes to the next layer (issue 55,
oww_hey_jarvis' model.4): its error is weighted by the gain the layer after the normalization
gives each channel (choices/normalized_gain.py), and it is kept as DequantizeLinear along the
axis that loses least where that beats its lean form (choices/channel_axis.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.graph_utils import collect_constants
from onnxsurgery.quantization.choices.normalized_gain import gains_through_norm


def normalized_gemms(w: np.ndarray, v: np.ndarray, gamma: np.ndarray, decomposed: bool = True,
                     layer_norm: bool = True, wide: int = 1024) -> onnx.ModelProto:
    """x -> Gemm W0 (n x wide, transB: the largest, kept at load first) -> Relu -> Gemm W (transB)
    -> LayerNorm (decomposed as torch.onnx writes it, or the op; none with `layer_norm` False)
    -> Relu -> Gemm V (transB)."""
    n = w.shape[0]
    w0 = np.random.default_rng(1).standard_normal((n, wide)) * 0.05
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), name) for a, name in
             ((w0, "W0"), (w, "W"), (np.zeros(n), "Wb"), (gamma, "gamma"), (np.full(n, 0.1), "beta"), (v, "V"),
              (np.array(2.0), "two"), (np.array(1e-5), "eps"))]
    nodes = [helper.make_node("Gemm", ["x", "W0"], ["h0"], transB=1), helper.make_node("Relu", ["h0"], ["r0"]),
             helper.make_node("Gemm", ["r0", "W", "Wb"], ["h"], transB=1)]
    if not layer_norm:
        nodes += [helper.make_node("Add", ["h", "beta"], ["ln"])]
    elif decomposed:
        nodes += [helper.make_node("ReduceMean", ["h"], ["m"], axes=[-1]), helper.make_node("Sub", ["h", "m"], ["d"]),
                  helper.make_node("Pow", ["d", "two"], ["d2"]),
                  helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
                  helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
                  helper.make_node("Div", ["d", "sd"], ["z"]), helper.make_node("Mul", ["z", "gamma"], ["zg"]),
                  helper.make_node("Add", ["zg", "beta"], ["ln"])]
    else:
        nodes += [helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["ln"], axis=-1)]
    nodes += [helper.make_node("Relu", ["ln"], ["r"]), helper.make_node("Gemm", ["r", "V"], ["y"], transB=1)]
    return builders.model(nodes, [builders.vi("x", shape=[4, wide])], [builders.vi("y", shape=[4, v.shape[0]])],
                          inits, opset=17)


def outlier_rows(n: int = 128, hot: int = 16):
    """W (n x n) whose `hot` rows each hold one outlier (12x), the rows the next layer reads with 100x
    the others' gain: per output row those rows round coarsely, per input column only the
    outliers' columns do."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, n)) * 0.1
    rows = rng.choice(n, hot, replace=False)
    for i in rows:
        w[i, rng.integers(n)] *= 12
    v = np.full((1, n), 0.01)
    v[0, rows] = 1.0
    return w, v


def _plan(tmp_path, model):
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    return {w.name: w for w in onnxsurgery.quant_plan(src, min_elements=1024).weights}


@pytest.mark.parametrize("decomposed", [True, False])
def test_gains_through_a_normalization_are_gamma_times_the_next_weight(decomposed):
    w, v = outlier_rows()
    gamma = np.linspace(0.5, 2.0, w.shape[0])
    graph = gs.import_onnx(normalized_gemms(w, v, gamma, decomposed=decomposed))
    site = next(s for s in collect_constants(graph) if s.name == "W")
    np.testing.assert_allclose(gains_through_norm(site, 0), np.abs(gamma * v[0]), rtol=1e-6)


def test_nothing_is_said_without_a_normalization():
    w, v = outlier_rows()
    graph = gs.import_onnx(normalized_gemms(w, v, np.ones(w.shape[0]), layer_norm=False))
    site = next(s for s in collect_constants(graph) if s.name == "W")
    assert gains_through_norm(site, 0) is None


def test_a_normalized_gemm_weight_takes_the_axis_its_next_layer_feels(tmp_path):
    """W's hot rows are what the output reads: per input column it loses less there, so it is kept
    as DequantizeLinear along axis 1, with the reason; W0 stays kept as before; the written model
    runs and stays close."""
    w, v = outlier_rows()
    model = normalized_gemms(w, v, np.ones(w.shape[0]))
    plan = _plan(tmp_path, model)
    assert (plan["W"].lowering, plan["W"].axis) == ("dq", 1)
    assert "before the Gemm along axis 1" in plan["W"].why and "normalization" in plan["W"].why
    assert plan["W0"].lowering == "dq"
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnxsurgery.quant_file(src, out, min_elements=1024)
    x = np.abs(builders.rand((4, 1024), 3))
    ref, got = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                for p in (src, out))
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05


def test_an_even_next_layer_leaves_the_lean_form(tmp_path):
    """The same W read evenly after the normalization: no axis loses 5% less, W stays lean."""
    w, _ = outlier_rows()
    plan = _plan(tmp_path, normalized_gemms(w, np.full((1, w.shape[0]), 0.5), np.ones(w.shape[0])))
    assert plan["W"].lowering == "scaled"


def test_without_a_normalization_the_gemm_weight_stays_lean(tmp_path):
    w, v = outlier_rows()
    plan = _plan(tmp_path, normalized_gemms(w, v, np.ones(w.shape[0]), layer_norm=False))
    assert plan["W"].lowering == "scaled"
