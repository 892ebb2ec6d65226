"""A weight stored in 16 bits gets the plan its float32 values get (issue 55): the same model with
its weights as bfloat16 behind Casts to float32 (a bfloat16 checkpoint's export, zoo/variants.py's
bf16) and with the same values stored as float32 plans the same forms, rounding and zero points,
except float16 storage, which a 16-bit weight has already: it is left as it is
(choices/weights.py's HALF_TYPES)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
import builders

FORM = ("dtype", "granularity", "block_size", "axis", "symmetric", "lowering", "rounding")


def _bf16_values(shape, seed, offset=0.0) -> np.ndarray:
    """float32 values bfloat16 holds exactly, each output channel on an offset (zero points pay)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape) * 0.05 + offset * rng.standard_normal((shape[0],) + (1,) * (len(shape) - 1))
    bits = w.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def _net(bf16: bool) -> onnx.ModelProto:
    """Conv (small: float16 in float32) -> Relu -> Conv (lean, balanced, zero points) -> Relu ->
    GlobalAveragePool -> Flatten -> MatMul (zero points) -> Add of a vector bias."""
    weights = {"c1": _bf16_values((32, 16, 3, 3), 0), "c2": _bf16_values((64, 32, 5, 5), 1, 0.2),
               "fc": _bf16_values((1280, 64), 2, 0.2).T.copy(),  # [64, 1280]: an offset per output column
               "bias": _bf16_values((1280,), 3)}
    nodes = [helper.make_node("Conv", ["x", "c1"], ["h1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("Conv", ["r1", "c2"], ["h2"], pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["y"])]
    inits = []
    for name, w in weights.items():
        if not bf16:
            inits.append(numpy_helper.from_array(w, name))
            continue
        raw = (w.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        inits.append(helper.make_tensor(name + "__bf16", TensorProto.BFLOAT16, list(w.shape), raw, raw=True))
        nodes.insert(0, helper.make_node("Cast", [name + "__bf16"], [name], to=TensorProto.FLOAT))
    return builders.model(nodes, [builders.vi("x", shape=[1, 16, 12, 12])], [builders.vi("y", shape=[1, 1280])],
                          inits, opset=17)


def test_bfloat16_weights_plan_as_their_float32_values(tmp_path):
    reports = {}
    for bf16 in (False, True):
        src = tmp_path / f"{'bf16' if bf16 else 'f32'}.onnx"
        onnx.save(_net(bf16), str(src))
        # --target onnxruntime: off the memory-at-load rule (target any), which keeps 16-bit
        # weights as float32 ones too (tests/test_half_plans_at_load.py)
        reports[bf16] = onnxsurgery.quant_file(src, tmp_path / f"q.{src.name}", min_elements=1024,
                                               target="onnxruntime")
    f32 = {r["name"]: r for r in reports[False].weights}
    bf16 = {r["name"].removesuffix("__bf16"): r for r in reports[True].weights}
    assert set(f32) == set(bf16)
    left = []
    for name, r in f32.items():
        if r["dtype"] == "float16":  # float16's analogue: the 16-bit weight left as it is
            assert bf16[name]["dtype"] == "float" and bf16[name]["why"].startswith("left in its 16 bits"), name
            left.append(name)
        else:
            assert [r[k] for k in FORM] == [bf16[name][k] for k in FORM], (name, r, bf16[name])
    # each 16-bit gate is crossed: float16 (small, vector), balanced rounding, zero points
    assert sorted(left) == ["bias", "c1"]
    assert f32["c2"]["rounding"] == "balanced" and not f32["c2"]["symmetric"]
    assert not f32["fc"]["symmetric"] and f32["fc"]["lowering"] == "scaled"
    # the written bfloat16 model is as accurate, against its own original, as the float32 one
    errors = [reports[b].verification["rel_l2_error"] for b in (False, True)]
    assert errors[1] <= 1.2 * errors[0] + 1e-6, errors
