"""Issue 59: damaged weights (huge finite values) go through quant without a numpy warning."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnxsurgery.errors import OnnxSurgeryError

import builders


def _huge_model(path, scale=1e30):
    w = builders.rand((64, 64), 1)
    huge = builders.rand((64, 64), 2) * scale  # squares overflow float32 (3.4e38)
    conv = builders.rand((16, 8, 3, 3), 3) * scale
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("MatMul", ["h", "H"], ["y"]),
             helper.make_node("Conv", ["img", "C"], ["z"], pads=[1, 1, 1, 1])]
    model = builders.model(nodes, [builders.vi("x", shape=[2, 64]), builders.vi("img", shape=[1, 8, 6, 6])],
                           [builders.vi("y", shape=[2, 64]), builders.vi("z", shape=[1, 16, 6, 6])],
                           [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (huge, "H"), (conv, "C"))])
    onnx.save(model, str(path))


@pytest.mark.parametrize("args", [{}, {"dtype": "int4"}, {"target": "tensorrt"}, {"keep_quantized": True}])
@pytest.mark.parametrize("verify", [False, True])
def test_huge_finite_weights_raise_no_numpy_warning(tmp_path, args, verify):
    from onnxsurgery.api.quantizing import quant_file

    src = tmp_path / "huge.onnx"
    _huge_model(src)
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")  # a leaked RuntimeWarning fails the test
        try:
            quant_file(src, tmp_path / "q.onnx", min_elements=16, verify=verify, **args)
        except OnnxSurgeryError:
            pass  # a refusal in words (outputs that are inf) is fine; a warning is not


def test_weight_error_of_huge_values_is_finite():
    from onnxsurgery.quantization.rounding import quantize, weight_error

    x = builders.rand((64, 64), 5) * 1e30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for args in (dict(), dict(dtype="int4", granularity="block", block_size=32, search_clip=True)):
            err = weight_error(x, quantize(x, **args))
            assert np.isfinite(err["rel_l2_error"]) and 0 < err["rel_l2_error"] < 0.2


@pytest.mark.parametrize("args", [{}, {"dtype": "int4"}, {"symmetric": True, "granularity": "block"}])
def test_nan_check_on_the_measurements_read_plans_as_checking_first(tmp_path, monkeypatch, args):
    """The NaN/Inf check is made on the read a measured choice makes anyway (planner._plan's
    defer_values); a weight that turns out not finite makes the plan again with every weight
    checked first: the same plan either way."""
    import onnxsurgery
    from onnxsurgery.quantization.choices import planner

    w = builders.rand((64, 64), 1)
    bad = builders.rand((64, 64), 2)
    bad[3, 5] = np.nan
    conv = builders.rand((16, 8, 3, 3), 3)
    conv[0, 0, 0, 0] = np.inf
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("MatMul", ["h", "N"], ["y"]),
             helper.make_node("Conv", ["img", "C"], ["z"], pads=[1, 1, 1, 1]),
             helper.make_node("Gather", ["W", "ids"], ["g"])]
    model = builders.model(nodes, [builders.vi("x", shape=[2, 64]), builders.vi("img", shape=[1, 8, 6, 6]),
                                   builders.vi("ids", onnx.TensorProto.INT64, shape=[3])],
                           [builders.vi("y", shape=[2, 64]), builders.vi("z", shape=[1, 16, 6, 6]),
                            builders.vi("g", shape=[3, 64])],
                           [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (bad, "N"), (conv, "C"))])
    src = tmp_path / "nan.onnx"
    onnx.save(model, str(src))
    deferred = onnxsurgery.quant_plan(src, min_elements=16, **args).to_dict()
    strict = planner._plan
    monkeypatch.setattr(planner, "_plan", lambda *a, **k: strict(*a, **{**k, "defer_values": False}))
    checked_first = onnxsurgery.quant_plan(src, min_elements=16, **args).to_dict()
    assert deferred == checked_first
    why = {r["name"]: r["why"] for r in deferred["weights"]}
    assert why["N"] == why["C"] == "holds NaN or Inf values"
