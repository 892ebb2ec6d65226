"""The zoo's float16 variant is skipped up front, with its reason, for graphs that
onnxconverter-common's conversion turns into a file onnxruntime refuses (zoo/variants.py,
`fp16_refusal`): a Cast to float32 anywhere (chars2vec's Loop counter, the titler's
quantize_dynamic outputs, an attention mask; 19 of the zoo's 38 models) and DequantizeLinear below
opset 19. Each refusal is checked against a real conversion of a tiny graph built here, so a
converter that learns these graphs fails the test (then the skip should go)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import variants  # noqa: E402

pytest.importorskip("onnxconverter_common")
from onnxconverter_common import float16  # noqa: E402

W = numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), "w")


def _model(nodes, inits, opset=17, outputs=None) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _matmul() -> onnx.ModelProto:
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [W])


def _loop(cast: bool = False) -> onnx.ModelProto:
    """y = x @ w @ w: a Loop of 2 trips whose body reads the outer weight (with `cast`, the trip
    count also goes to float32 and is added, as tf2onnx's while loops compute with it)."""
    nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("MatMul", ["h_in", "w"], ["h_out"])]
    if cast:
        nodes[1].output[0] = "h_mm"
        nodes += [helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
                  helper.make_node("Add", ["h_mm", "i_f"], ["h_out"])]
    body = helper.make_graph(
        nodes,
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [2, 8])])
    trips = numpy_helper.from_array(np.array(2, np.int64), "trips")
    cond = numpy_helper.from_array(np.array(True), "cond")
    return _model([helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body)], [W, trips, cond])


def _dynamic_quantize() -> onnx.ModelProto:
    """quantize_dynamic's form: x -> DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the scales."""
    wq = numpy_helper.from_array(np.arange(-32, 32, dtype=np.int8).reshape(8, 8), "wq")
    ws = numpy_helper.from_array(np.array(0.03, np.float32), "ws")
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "wq", "xz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]), helper.make_node("Mul", ["accf", "s"], ["y"])]
    return _model(nodes, [wq, ws])


def _dequantize(opset: int) -> onnx.ModelProto:
    wq = numpy_helper.from_array(np.arange(-32, 32, dtype=np.int8).reshape(8, 8), "wq")
    ws = numpy_helper.from_array(np.array(0.03, np.float32), "ws")
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"]), helper.make_node("MatMul", ["x", "wd"], ["y"])]
    return _model(nodes, [wq, ws], opset=opset)


def _loads_after_conversion(m: onnx.ModelProto, tmp_path: Path) -> bool:
    path = tmp_path / "m.fp16.onnx"
    onnx.save_model(float16.convert_float_to_float16(m, keep_io_types=True), str(path))
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal is the point
        return False
    return True


def _mask_cast() -> onnx.ModelProto:
    """y = x @ w + float(x > 0): a comparison cast to float32, as attention masks are."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Greater", ["x", "zero"], ["b"]),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["xw", "bf"], ["y"])]
    return _model(nodes, [W, numpy_helper.from_array(np.array(0, np.float32), "zero")])


@pytest.mark.parametrize("make, words", [(lambda: _loop(cast=True), "1 Cast to float32"),
                                         (_dynamic_quantize, "Cast to float32"), (_mask_cast, "1 Cast to float32"),
                                         (lambda: _dequantize(13), "opset 19")])
def test_refused_graphs_are_named_before_converting(make, words, tmp_path):
    m = make()
    ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # the original runs
    assert words in (variants.fp16_refusal(m) or "")
    assert not _loads_after_conversion(m, tmp_path)  # the refusal is the converter's, not a guess


@pytest.mark.parametrize("make", [_matmul, _loop, lambda: _dequantize(19)])
def test_convertible_graphs_are_built(make, tmp_path):
    m = make()
    assert variants.fp16_refusal(m) is None
    assert _loads_after_conversion(m, tmp_path)


def test_the_variant_skips_with_the_reason(tmp_path):
    src = tmp_path / "loop.onnx"
    onnx.save_model(_mask_cast(), str(src))
    with pytest.raises(variants.Skip, match="Cast to float32"):
        variants.fp16(src, tmp_path / "out")
    assert not list((tmp_path).glob("**/*.fp16.onnx"))
