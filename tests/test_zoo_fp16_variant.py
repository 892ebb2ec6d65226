"""The zoo's float16 variant mends what onnxconverter-common's conversion leaves float32 inside a
float16 graph (zoo/variants.py, `fp16`): a Cast to float32 (chars2vec's Loop counter, the titler's
quantize_dynamic outputs, an attention mask: 19 of the zoo's 38 models), DequantizeLinear below
opset 19, an output that other nodes also read. Each case is a tiny graph that the converter alone
turns into a file onnxruntime refuses (so a converter that learns it fails the test: then the
mending should go), and that the variant turns into one that runs and computes the original."""

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


def _output_also_read() -> onnx.ModelProto:
    """h = x @ w is an output and is read again (y = h @ w): the converter casts the output to
    float32 for every reader (MiniLM, the romanizer's encoder)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])]
    return _model(nodes, [W], outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
                                       helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 8])])


def _resize_by_sizes() -> onnx.ModelProto:
    """A Resize given its sizes, its roi and scales empty Constants (paddle2onnx's form, SLANet+):
    the converter casts the empty scales to float32 around the blocked Resize."""
    empty = helper.make_tensor("e", TensorProto.FLOAT, [0], [])
    shape4 = numpy_helper.from_array(np.array([1, 1, 2, 8], np.int64), "shape4")
    shape2 = numpy_helper.from_array(np.array([2, 8], np.int64), "shape2")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Reshape", ["h", "shape4"], ["h4"]),
             helper.make_node("Constant", [], ["roi"], value=empty),
             helper.make_node("Constant", [], ["scales"], value=empty),
             helper.make_node("Resize", ["h4", "roi", "scales", "shape4"], ["r4"], mode="nearest"),
             helper.make_node("Reshape", ["r4", "shape2"], ["y"])]
    return _model(nodes, [W, shape4, shape2])


def _scaled() -> onnx.ModelProto:
    """ai.onnx.ml's Scaler, a Cast to float32 and a MatMul, as skl2onnx writes an MLP (surfaces'
    surrogates)."""
    nodes = [helper.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml", offset=[0.5] * 8, scale=[2.0] * 8),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["sf", "w"], ["y"])]
    m = _model(nodes, [W])
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    return m


@pytest.mark.parametrize("make", [lambda: _loop(cast=True), _dynamic_quantize, _mask_cast, lambda: _dequantize(13),
                                  _output_also_read, _resize_by_sizes, _scaled])
def test_the_converters_leftovers_are_mended(make, tmp_path):
    m = make()
    x = {"x": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
    assert not _loads_after_conversion(make(), tmp_path)  # the converter alone gives a file onnxruntime refuses
    src = tmp_path / "m.onnx"
    onnx.save_model(m, str(src))
    out = variants.build("fp16", src, tmp_path / "out")
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, x)
    for a, b in zip(want, got):
        assert b.dtype == np.float32  # keep_io_types
        np.testing.assert_allclose(b, a, rtol=2e-2, atol=2e-2)
    weights = onnx.load(str(out)).graph.initializer
    assert all(t.data_type != TensorProto.FLOAT for t in weights if t.name == "w")


@pytest.mark.parametrize("make", [_matmul, _loop, lambda: _dequantize(19)])
def test_convertible_graphs_are_built(make, tmp_path):
    assert _loads_after_conversion(make(), tmp_path)
    src = tmp_path / "m.onnx"
    onnx.save_model(make(), str(src))
    variants.build("fp16", src, tmp_path / "out")


def test_weights_out_of_float16_range_skip_the_variant(tmp_path):
    """A BatchNorm variance past float16's largest (ppocr_v4_seal_det's, 5.8e7) is clamped by the
    converter: the float16 original computes another function, so no fp16 variant is judged."""
    c = 4
    var = np.full(c, 1.0, np.float32)
    var[1] = 5.8e7
    inits = [numpy_helper.from_array(a, n) for n, a in (("s", np.ones(c, np.float32)), ("b", np.zeros(c, np.float32)),
                                                        ("m", np.zeros(c, np.float32)), ("v", var))]
    g = helper.make_graph([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 2, 2])], inits)
    src = tmp_path / "bn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(src))
    with pytest.raises(variants.Skip, match="leave float16's range \\(v up to 5.8e\\+07"):
        variants.fp16(src, tmp_path)
    var[1] = 6.0e4  # within float16's range: built (a scalar fill value past it would not skip either)
    g.initializer[3].CopyFrom(numpy_helper.from_array(var, "v"))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(src))
    assert variants.fp16(src, tmp_path).exists()
