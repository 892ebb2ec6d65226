"""Under --dtype int4, a 16-bit weight read through Casts to float32 takes the form its float32
twin takes (choices/int4_paths.py): the readers behind the Casts decide (a Conv: int8 lean, no
4-bit; a MatMul with K not tiled by a power of two: int8 lean), and the model's share of Conv
bytes counts the Convs behind Casts. Before, the Cast was judged as the reader: 4-bit everywhere."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

import builders
from test_half_plans import FORM, _bf16_values
from test_half_plans_at_load import _plans, _stored


def _conv_and_matmul(bf16: bool):
    """A 64x64x3x3 Conv (below SMALL_CONV_ELEMENTS: int8 lean), then a MatMul with K = 96 (blocks of
    32 tile it; fused) and one with K = 120 (not a power-of-two tiling: int8 lean)."""
    nodes, inits = [], []
    inits.append(_stored("k", _bf16_values((64, 64, 3, 3), 1, 0.1), bf16, nodes))
    nodes += [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Reshape", ["c", "flat"], ["f"])]
    inits.append(numpy_helper.from_array(np.array([64, 96], np.int64), "flat"))
    inits.append(_stored("w", _bf16_values((96, 120), 2, 0.1), bf16, nodes))
    inits.append(_stored("v", _bf16_values((120, 64), 3, 0.1), bf16, nodes))
    nodes += [helper.make_node("MatMul", ["f", "w"], ["m"]), helper.make_node("MatMul", ["m", "v"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[1, 64, 8, 12])], [builders.vi("y", shape=[64, 64])],
                          inits, opset=21)


def test_int4_forms_look_behind_the_casts(tmp_path):
    plans = _plans(tmp_path, _conv_and_matmul, min_elements=1024, dtype="int4")
    f32, bf16 = plans[False], plans[True]
    assert f32["k"].dtype == "int8" and f32["v"].dtype == "int8" and f32["w"].dtype == "int4"  # the rule's
    for name in f32:
        assert [getattr(f32[name], k) for k in FORM] == [getattr(bf16[name], k) for k in FORM], name
        assert f32[name].why == bf16[name].why, name
