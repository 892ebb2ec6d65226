"""choices/transform_basis.py: a signed basis whose output reaches a Log through passing ops is
left float; a non-negative one (a filterbank summing powers), one with no Log after it, or one
--include names is quantized as before."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery


def _bank(path, *, signed=True, log=True, bf16=False):
    """Hann-windowed sinusoids read by a Conv, squared, then (log) Log; `bf16`: stored as bfloat16
    behind a Cast to float32, as the zoo's bf16 variant stores it."""
    t = np.arange(128) / 16000.0
    bank = np.hanning(128) * np.cos(2 * np.pi * (100.0 * 2 ** (np.arange(48) / 12))[:, None] * t)
    bank = (bank if signed else np.abs(bank)).astype(np.float32)[:, None, :]
    nodes = [helper.make_node("Conv", ["x", "k"], ["r"], strides=[32]), helper.make_node("Mul", ["r", "r"], ["p"]),
             helper.make_node("Add", ["p", "eps"], ["pe"])]
    nodes.append(helper.make_node("Log" if log else "Sqrt", ["pe"], ["y"]))
    inits = [numpy_helper.from_array(bank, "k"), numpy_helper.from_array(np.array(1e-10, np.float32), "eps")]
    if bf16:
        import ml_dtypes

        inits[0] = numpy_helper.from_array(bank.astype(ml_dtypes.bfloat16), "k16")
        nodes.insert(0, helper.make_node("Cast", ["k16"], ["k"], to=TensorProto.FLOAT))
    graph = helper.make_graph(nodes, "bank", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def test_a_signed_basis_before_a_log_is_left_float_and_says_why(tmp_path):
    from onnxsurgery.quantization.choices.transform_basis import BASIS_REASON

    src = tmp_path / "bank.onnx"
    _bank(src)
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", verify=False)
    q = onnx.load(tmp_path / "q.onnx")
    assert "k" in {i.name for i in q.graph.initializer if i.data_type == TensorProto.FLOAT}
    assert [r["why"] for r in report.weights if r["name"] == "k"] == [BASIS_REASON]


def test_a_16_bit_basis_behind_its_cast_is_left_as_it_is(tmp_path):
    """Its readers are found behind the Cast (the zoo's bf16 variant of basic_pitch_nmp: 0.107
    quantized, against 0.0075 as shipped)."""
    from onnxsurgery.quantization.choices.transform_basis import BASIS_REASON

    src = tmp_path / "bank16.onnx"
    _bank(src, bf16=True)
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", verify=False)
    assert [r["why"] for r in report.weights if r["name"] == "k16"] == [BASIS_REASON]


def test_a_filterbank_without_cancelling_or_without_a_log_is_quantized(tmp_path):
    for name, bank in (("nonneg", {"signed": False}), ("nolog", {"log": False})):
        src = tmp_path / f"{name}.onnx"
        _bank(src, **bank)
        onnxsurgery.quant_file(src, tmp_path / f"{name}.q.onnx", verify=False)
        q = onnx.load(tmp_path / f"{name}.q.onnx")
        assert "k" not in {i.name for i in q.graph.initializer if i.data_type == TensorProto.FLOAT}, name


def test_include_quantizes_the_basis(tmp_path):
    src = tmp_path / "bank.onnx"
    _bank(src)
    onnxsurgery.quant_file(src, tmp_path / "q.onnx", verify=False, include=("k",))
    q = onnx.load(tmp_path / "q.onnx")
    assert "k" not in {i.name for i in q.graph.initializer if i.data_type == TensorProto.FLOAT}
