"""Commands that keep a weight as the input has it, on onnxruntime 1.32's crash edge (a float16
Transpose [1, 0, 2] read as A by a MatMul whose B is a float16 constant as folded:
running/default_crash.py). `shrink` (lossless) and `quant` leaving the weight float16 (`--exclude`,
`--fp16` on a float16 input) write the edge as the input has it: the output keeps the input's crash,
and the report says so. `quant --fp16` of a float32 model does not create it: the weight becomes
float16 behind a Cast back to float32, every activation stays float32. Default sessions are made in
a child process only (test_crash_edges.py's): a crash there must not end the test run."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from test_crash_edges import CRASHES_HERE, _default_run, _input_run, _model, _rel

from onnxsurgery import quant_file, shrink_file

X16 = np.random.default_rng(1).standard_normal((5, 3, 64)).astype(np.float16)
SAYS = "dies at creation"


@pytest.mark.parametrize("verify", [False, True])
def test_shrink_keeps_the_crash_of_its_input_and_says_so(tmp_path, verify):
    src, out = tmp_path / "half.onnx", tmp_path / "s.onnx"
    onnx.save(_model(), src)
    report = shrink_file(src, out, verify=verify, samples=[{"x": X16}] if verify else None)
    said = [n for n in report.notes if SAYS in n]
    if not CRASHES_HERE:
        assert not said
        return
    assert len(said) == 1 and "as a default session of its input does" in said[0] and "proj" in said[0]
    assert _default_run(src, X16, tmp_path)[0] < 0
    assert _default_run(out, X16, tmp_path)[0] < 0  # kept, not made: the input dies the same way
    assert np.array_equal(_input_run(src, X16), _input_run(out, X16))


def test_shrink_of_a_model_without_the_edge_says_nothing_of_it(tmp_path):
    src, out = tmp_path / "single.onnx", tmp_path / "s.onnx"
    onnx.save(_model(TensorProto.FLOAT), src)
    assert not [n for n in shrink_file(src, out).notes if SAYS in n]


def test_fp16_of_a_float32_model_does_not_make_the_edge(tmp_path):
    """The float32 model has the Transpose [1, 0, 2] and a constant B: --fp16 stores B in float16
    with a Cast back to float32, so the MatMul stays float32 and a default session loads it."""
    src, out = tmp_path / "single.onnx", tmp_path / "q.onnx"
    onnx.save(_model(TensorProto.FLOAT), src)
    x = X16.astype(np.float32)
    report = quant_file(src, out, min_elements=16, fp16=True, samples=[{"x": x}])
    assert [w["lowering"] for w in report.weights] == ["cast"]
    assert SAYS not in report.verification["runtime"]
    rc, y = _default_run(out, x, tmp_path)
    assert rc == 0
    assert _rel(_input_run(src, x), y) <= report.verification["rel_l2_error"] * 1.01 + 1e-6


@pytest.mark.parametrize("options", [{"exclude": ["w"]}, {"fp16": True}])
def test_quant_leaving_a_float16_weight_keeps_the_crash_and_says_so(tmp_path, options):
    """A float16 input: --exclude leaves its weight as it is, --fp16 takes float32 weights only."""
    src, out = tmp_path / "half.onnx", tmp_path / "q.onnx"
    onnx.save(_model(), src)
    report = quant_file(src, out, min_elements=16, **options)
    assert (SAYS in report.verification["runtime"]) == CRASHES_HERE
    if CRASHES_HERE:
        assert _default_run(out, X16, tmp_path)[0] < 0 and _default_run(src, X16, tmp_path)[0] < 0
