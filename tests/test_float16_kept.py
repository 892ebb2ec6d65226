"""float16 weights read in float16 (storage12): the memory-at-load rule has a float16 part
(float16_lean.float16_kept): the largest float16 Convs are kept quantized as DequantizeLinear
before the Conv, where their chains' folding would hold more than the float16 original."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
import builders


def _net(weights: dict[str, np.ndarray], channels: int, half: bool = True) -> onnx.ModelProto:
    t = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    inits = [numpy_helper.from_array(w if half else w.astype(np.float32), n) for n, w in weights.items()]
    nodes, x = [], "x"
    for i, (name, w) in enumerate(weights.items()):
        ph, pw = (w.shape[2] - 1) // 2, (w.shape[3] - 1) // 2
        nodes.append(helper.make_node("Conv", [x, name], [f"h{i}"], pads=[ph, pw, ph, pw]))
        x = f"h{i}"
    last = list(weights.values())[-1].shape[0]
    return builders.model(nodes, [builders.vi("x", t, [1, channels, 4, 4])], [builders.vi(x, t, [1, last, 4, 4])],
                          inits, opset=17)


def _records(plan) -> dict[str, tuple]:
    return {r["name"]: (r["lowering"], r["axis"]) for r in plan.to_dict()["weights"] if r["dtype"] == "int8"}


def test_large_float16_convs_are_kept_quantized(tmp_path):
    rng = np.random.default_rng(2)
    w = {"big": (rng.standard_normal((512, 256, 3, 3)) * 0.02).astype(np.float16),  # 1.18M elements
         "small": (rng.standard_normal((64, 512, 3, 3)) * 0.02).astype(np.float16)}
    src = tmp_path / "m.onnx"
    onnx.save(_net(w, 256), str(src))
    records = _records(onnxsurgery.quant_plan(src))
    assert records["big"] == ("dq", 0), records  # kept: DequantizeLinear before its Conv
    assert records["small"][0] != "dq", records  # under load_memory.LARGE_CONV_ELEMENTS: left lean
    # --target onnxruntime is off the memory rule: the float16 chains stay
    assert _records(onnxsurgery.quant_plan(src, target="onnxruntime"))["big"][0] != "dq"
    out = tmp_path / "q.onnx"
    onnxsurgery.quant_file(src, out, verify=False)
    kinds = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "DequantizeLinear" in kinds
    x = {"x": rng.standard_normal((1, 256, 4, 4)).astype(np.float16)}
    a, b = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, x)[0].astype(np.float64)
            for p in (src, out))
    assert np.isfinite(b).all() and np.linalg.norm(a - b) / np.linalg.norm(a) < 0.03
