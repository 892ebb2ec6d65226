"""A batched MatMul weight [members, K, N] (a deep ensemble's members as one MatMul,
tglf_multimachine): its scale per output column commutes with the MatMul as a 2-D weight's does,
so the default takes the lean `scaled` form (the float MatMul, a Mul after it), not the arith chain
that the memory rule then kept as DequantizeLinear, dequantized at every run (2.8x tglf's latency;
onnxruntime fuses no 3-D weight into MatMulNBits)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import builders
import onnxsurgery

MEMBERS, K, N = 5, 64, 96


def _ensemble() -> onnx.ModelProto:
    """x [1, B, K] broadcast over 5 members -> MatMul W [5, K, N] -> Relu -> MatMul V [5, N, 2]."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((MEMBERS, K, N)) * 0.2 + 0.05).astype(np.float32)
    v = rng.standard_normal((MEMBERS, N, 2)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "V"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[1, 8, K])], [builders.vi("y", shape=[MEMBERS, 8, 2])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V")], opset=13)


def _run(path) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal((1, 8, K)).astype(np.float32)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_the_default_scales_a_batched_weight_after_its_matmul(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(_ensemble(), str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024)
    (record,) = [r for r in report.weights if r["name"] == "W"]
    assert (record["lowering"], record["granularity"], record["axis"]) == ("scaled", "channel", 2)
    out = onnx.load(str(tmp_path / "q.onnx"))
    assert not [n for n in out.graph.node if n.op_type == "DequantizeLinear"]  # nothing dequantized at each run
    ref, got = _run(src), _run(tmp_path / "q.onnx")
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.01


@pytest.mark.parametrize("symmetric", [False, True])
def test_the_scaled_form_computes_what_dequantize_linear_does(tmp_path, symmetric):
    """Asked by a plan, with zero points (their ReduceSum term over the batched input) and without:
    as close to the float model as DequantizeLinear per column is (the integers differ: scaled
    equalizes the input rows first), where a scale or zero point broadcast over the wrong axis
    errs by its whole size."""
    src = tmp_path / "in.onnx"
    onnx.save(_ensemble(), str(src))
    ref, errors = _run(src), {}
    for lowering in ("scaled", "dq"):
        record = {"name": "W", "dtype": "int8", "granularity": "channel", "axis": 2, "symmetric": symmetric,
                  "lowering": lowering, "block_size": None, "rounding": "nearest", "levels": None}
        plan = tmp_path / f"{lowering}.json"
        plan.write_text(json.dumps({"version": 1, "opset": 13, "target": "any", "weights": [record]}))
        onnxsurgery.quant_file(src, tmp_path / f"{lowering}.onnx", plan=plan, verify=False)
        got = _run(tmp_path / f"{lowering}.onnx")
        errors[lowering] = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert errors["dq"] < 0.01 and errors["scaled"] < 2 * errors["dq"], errors
