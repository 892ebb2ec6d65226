"""A float16 weight its Convs multiply in float16 quantizes as well as its float32 values do
(storage11): where a float32 weight's lean form is `scaled` with input-side equalization, the
float16 one gets `arith_equalized`, the same integers, scales and input scales folded at load
(plain `arith` lost the equalization: trueocr_rec's float16 storage 0.0183 against 0.0100).
And opset.upgrade_opset keeps a graph output's declared type where a value info of the same name
says float16 (onnxconverter-common's float16 models: the int4 upgrade's output did not load)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
import builders
from onnxsurgery.opset import upgrade_opset


def _weights() -> dict[str, np.ndarray]:
    """Conv weights whose input channels differ in range (what the equalization is for)."""
    rng = np.random.default_rng(0)
    out = {}
    for name, shape in (("c1", (64, 32, 3, 3)), ("c2", (64, 64, 3, 3))):
        rows = np.exp(rng.normal(0.0, 1.2, (1, shape[1], 1, 1)))
        out[name] = (rng.standard_normal(shape) * 0.05 * rows).astype(np.float16).astype(np.float32)
    return out


def _net(half: bool) -> onnx.ModelProto:
    t = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    dtype = np.float16 if half else np.float32
    inits = [numpy_helper.from_array(w.astype(dtype), n) for n, w in _weights().items()]
    nodes = [helper.make_node("Conv", ["x", "c1"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "c2"], ["y"], pads=[1, 1, 1, 1])]
    return builders.model(nodes, [builders.vi("x", t, [1, 32, 12, 12])], [builders.vi("y", t, [1, 64, 12, 12])],
                          inits, opset=17)


def _error(src, out, feeds) -> float:
    a, b = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)[0].astype(np.float64)
            for p in (src, out))
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


def test_float16_convs_keep_the_equalization(tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 32, 12, 12))
    errors, lowerings = {}, {}
    for half in (False, True):
        src = tmp_path / f"{half}.onnx"
        onnx.save(_net(half), str(src))
        # --target onnxruntime: off the memory-at-load rule, which keeps a float32 Conv as dq
        report = onnxsurgery.quant_file(src, tmp_path / f"q{half}.onnx", verify=False, target="onnxruntime")
        lowerings[half] = {r["name"]: (r["lowering"], r["axis"]) for r in report.weights if r["dtype"] == "int8"}
        errors[half] = _error(src, tmp_path / f"q{half}.onnx", {"x": x.astype(np.float16 if half else np.float32)})
    assert lowerings[False] == {"c1": ("scaled", 0), "c2": ("scaled", 0)}
    assert lowerings[True] == {"c1": ("arith_equalized", 0), "c2": ("arith_equalized", 0)}
    assert errors[True] <= 1.2 * errors[False], errors
    # the same plan with plain `arith` (no input-side scales): what the float16 storage got before
    src = tmp_path / "True.onnx"
    plan = onnxsurgery.quant_plan(src, target="onnxruntime")
    plain = plan.to_dict()
    for r in plain["weights"]:
        if r["lowering"] == "arith_equalized":
            r["lowering"] = "arith"
    onnxsurgery.quant_file(src, tmp_path / "plain.onnx", plan=plain, verify=False, target="onnxruntime")
    assert _error(src, tmp_path / "plain.onnx", {"x": x.astype(np.float16)}) > 1.3 * errors[True]


def test_the_upgrade_keeps_a_declared_output_type():
    m = _net(half=True)
    m.graph.output[0].CopyFrom(builders.vi("out", TensorProto.FLOAT, [1, 64, 12, 12]))
    m.graph.node.append(helper.make_node("Cast", ["y"], ["out"], to=TensorProto.FLOAT))
    m.graph.value_info.append(builders.vi("out", TensorProto.FLOAT16, [1, 64, 12, 12]))  # the converter's
    up = upgrade_opset(m, 21)
    assert up.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    ort.InferenceSession(up.SerializeToString(), providers=["CPUExecutionProvider"])
