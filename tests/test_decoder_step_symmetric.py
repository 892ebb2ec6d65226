"""A KV-cache decoder's lean `scaled` weights stay symmetric (choices/lean.py, the comment after
INPUT_FORM_MARGIN): a decoder step reads a few tokens, and the zero points' ReduceSum, Sub and Mul
per reader would cost more than its MatMuls. The same weight outside a decoder gets them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from conftest import run


@pytest.fixture(autouse=True)
def _lean_forms_alone(monkeypatch):
    """No embedding table to save memory elsewhere: the load-memory rule would keep the weight in
    DequantizeLinear instead (as in tests/test_lean_lowerings.py)."""
    from onnxsurgery.quantization.choices import load_memory, planner  # noqa: F401 - planner's imports read it first

    monkeypatch.setattr(load_memory, "EXTRA_AT_LOAD", {})


def _step(cache: str, k: int = 128, n: int = 48) -> onnx.ModelProto:
    """A k x n MatMul weight whose every value is positive (zero points measure more accurate on
    it) and a cache input named `cache`, whose next value the step writes."""
    w = np.abs(builders.rand((k, n), 3)) * 0.1 + 0.05
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]),
             helper.make_node("Concat", [cache, "y"], ["present_key"], axis=0)]
    return builders.model(nodes, [builders.vi("x", shape=[4, k]), builders.vi(cache, shape=["past", n])],
                          [builders.vi("y", shape=[4, n]), builders.vi("present_key", shape=["total", n])],
                          [numpy_helper.from_array(w, "W")])


def _quant(tmp_path, model):
    tmp_path.mkdir(exist_ok=True)
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, min_elements=1024)
    (record,) = [r for r in report.weights if r["name"] == "W"]
    return onnx.load(str(out)), out, record


def test_a_decoder_step_keeps_its_scaled_weights_symmetric(tmp_path):
    decoder = _step("past_key")
    saved, out, record = _quant(tmp_path / "step", decoder)
    assert (record["lowering"], record["symmetric"]) == ("scaled", True)
    assert "KV-cache decoder's step" in record["why"]
    assert "ReduceSum" not in {n.op_type for n in saved.graph.node}
    feeds = builders.feeds_for(decoder)
    (want, _), (got, _) = run(decoder, feeds), run(out, feeds)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.02
    # the same weight outside a decoder (its cache-like input not named as a past) takes zero points
    saved, _, record = _quant(tmp_path / "other", _step("state"))
    assert (record["lowering"], record["symmetric"]) == ("scaled", False)
    assert "zero points" in record["why"] and "ReduceSum" in {n.op_type for n in saved.graph.node}


def test_a_large_decoder_weight_keeps_its_zero_points(tmp_path):
    """Above DECODER_STEP_MAX_ELEMENTS the term's cost is lost in the MatMul's: zero points stay."""
    from onnxsurgery.quantization.choices.lean import DECODER_STEP_MAX_ELEMENTS

    assert 512 * 1024 > DECODER_STEP_MAX_ELEMENTS
    _, _, record = _quant(tmp_path, _step("past_key", 512, 1024))
    assert (record["lowering"], record["symmetric"]) == ("scaled", False)
