"""--dtype int4 keeps the int8 default's plan where its 4-bit weights save under int4_saving.SAVING of
the int8 plan's weight bytes (quantization/choices/int4_saving.py): a model whose weights stay 8-bit
under int4 (an LSTM: no 4-bit recurrent kernel) with one small MatMul that would go 4-bit pays that
MatMul's error for a few percent of the bytes. A MatMul-heavy model keeps its 4-bit plan."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.quantization.choices import int4_saving

HIDDEN = 64
FORM = ("dtype", "granularity", "block_size", "axis", "symmetric", "lowering", "bytes_after")


def lstm_and_matmul() -> onnx.ModelProto:
    """An LSTM (W [1, 256, 64], R [1, 256, 64]: 8-bit under int4) and a 64x64 MatMul after it."""
    inits = [numpy_helper.from_array(builders.rand((1, 4 * HIDDEN, 64), 1) * 0.1, "W"),
             numpy_helper.from_array(builders.rand((1, 4 * HIDDEN, HIDDEN), 2) * 0.1, "R"),
             numpy_helper.from_array(builders.rand((HIDDEN, 64), 3) * 0.1, "M"),
             numpy_helper.from_array(np.array([1, HIDDEN], np.int64), "flat")]
    nodes = [helper.make_node("LSTM", ["seq", "W", "R"], ["", "h"], hidden_size=HIDDEN),
             helper.make_node("Reshape", ["h", "flat"], ["f"]),
             helper.make_node("MatMul", ["f", "M"], ["y"])]
    return builders.model(nodes, [builders.vi("seq", shape=[5, 1, 64])], [builders.vi("y", shape=[1, 64])], inits)


def matmuls(n: int = 4) -> onnx.ModelProto:
    """A chain of n 256x256 MatMuls: every weight goes 4-bit, fused into MatMulNBits."""
    inits = [numpy_helper.from_array(builders.rand((256, 256), 10 + i) * 0.05, f"M{i}") for i in range(n)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"M{i}"], [f"h{i + 1}" if i < n - 1 else "y"])
             for i in range(n)]
    return builders.model(nodes, [builders.vi("x", shape=[2, 256])], [builders.vi("y", shape=[2, 256])], inits)


def _plans(path, **options):
    four = {r.name: r for r in onnxsurgery.quant_plan(path, dtype="int4", **options).weights}
    eight = {r.name: r for r in onnxsurgery.quant_plan(path, **options).weights}
    return four, eight


def test_int4_saving_little_keeps_the_int8_default_plan(tmp_path, monkeypatch):
    path = tmp_path / "lstm.onnx"
    onnx.save(lstm_and_matmul(), str(path))
    with monkeypatch.context() as m:  # the rule off: the MatMul goes 4-bit, the LSTM's weights int8
        m.setattr(int4_saving, "SAVING", 0.0)
        alone = {r.name: r for r in onnxsurgery.quant_plan(path, dtype="int4").weights}
    assert alone["M"].dtype == "int4" and alone["W"].dtype == "int8"
    four, eight = _plans(path)
    for name in ("W", "R", "M"):
        assert [getattr(four[name], k) for k in FORM] == [getattr(eight[name], k) for k in FORM], name
    # the why says so where the int4 plan's form differed (the MatMul); the LSTM's were int8's already
    assert four["M"].why.startswith("int4 would save ") and "kept the int8 forms" in four["M"].why, four["M"].why
    assert four["M"].dtype != "int4"
    assert four["W"].why == eight["W"].why


def test_int4_saving_little_runs_as_the_int8_default(tmp_path):
    path, out4, out8 = tmp_path / "lstm.onnx", tmp_path / "q4.onnx", tmp_path / "q8.onnx"
    onnx.save(lstm_and_matmul(), str(path))
    onnxsurgery.quant_file(path, out4, dtype="int4")
    onnxsurgery.quant_file(path, out8)
    x = {"seq": builders.rand((5, 1, 64), 7)}
    y4, = ort.InferenceSession(str(out4), providers=["CPUExecutionProvider"]).run(None, x)
    y8, = ort.InferenceSession(str(out8), providers=["CPUExecutionProvider"]).run(None, x)
    np.testing.assert_allclose(y4, y8, rtol=1e-5, atol=1e-6)


def test_the_decision_is_the_same_with_external_data(tmp_path):
    """Weighed in weight bytes: the data file moves no decision."""
    inline, external = tmp_path / "in.onnx", tmp_path / "ext" / "in.onnx"
    external.parent.mkdir()
    onnx.save(lstm_and_matmul(), str(inline))
    onnx.save(lstm_and_matmul(), str(external), save_as_external_data=True, all_tensors_to_one_file=True,
              location="in.onnx.data", size_threshold=0)
    a, _ = _plans(inline)
    b, _ = _plans(external)
    assert {n: [getattr(r, k) for k in FORM] + [r.why] for n, r in a.items()} == \
        {n: [getattr(r, k) for k in FORM] + [r.why] for n, r in b.items()}


def test_a_matmul_heavy_model_keeps_its_4_bit_plan(tmp_path):
    path = tmp_path / "mm.onnx"
    onnx.save(matmuls(), str(path))
    four, eight = _plans(path)
    assert all(four[f"M{i}"].dtype == "int4" and "kept the int8 forms" not in four[f"M{i}"].why for i in range(4))
    saved = 1 - sum(r.bytes_after for r in four.values()) / sum(r.bytes_after for r in eight.values())
    assert saved >= int4_saving.SAVING


def test_clearly_worth_is_a_bound_the_exact_share_agrees_with(tmp_path):
    """Where the bound skips the int8 plan, the exact share is over the line too."""
    path = tmp_path / "mm.onnx"
    onnx.save(matmuls(), str(path))
    four = onnxsurgery.quant_plan(path, dtype="int4")
    eight = onnxsurgery.quant_plan(path)
    assert int4_saving.clearly_worth(four, 0)
    assert int4_saving.saving(four, eight, 0) >= int4_saving.SAVING
    lstm = tmp_path / "lstm.onnx"
    onnx.save(lstm_and_matmul(), str(lstm))
    assert not int4_saving.clearly_worth(onnxsurgery.quant_plan(lstm, dtype="int4"), 0)


def test_info_estimates_int4_as_the_plan_decides(tmp_path):
    """info's `quant int4` estimate follows the rule: the int8 default's where the plan keeps it."""
    lstm, mm = tmp_path / "lstm.onnx", tmp_path / "mm.onnx"
    onnx.save(lstm_and_matmul(), str(lstm))
    onnx.save(matmuls(), str(mm))
    saved = onnxsurgery.info(lstm)["savings"]
    assert saved["quant int4"] == saved["quant int8"]
    saved = onnxsurgery.info(mm)["savings"]
    assert saved["quant int4"] > saved["quant int8"]
