"""A 4-bit weight's joined MatMul in a twinned session, run over its even and odd columns' nibbles
through the 8-bit kernels (running/nibbles.py): the same outputs, bit for bit, as runs of the file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.running import nibbles, sessions
from onnxsurgery.running.twinned import joined_feeds, outputs_of, split_outputs, twin_graph

K, N = 64, 96


def _model(dtype: int, zero_point: bool, seed: int = 0) -> onnx.ModelProto:
    """x [b, K] -> MatMul by DequantizeLinear(a 4-bit [K, N] weight in blocks of 32 rows) -> y."""
    rng = np.random.default_rng(seed)
    low = -8 if dtype == TensorProto.INT4 else 0
    weight, zero = rng.integers(low, low + 16, (K, N)), rng.integers(low, low + 16, (K // 32, N))
    inits = [helper.make_tensor("w", dtype, [K, N], weight.reshape(-1).tolist()),
             numpy_helper.from_array(rng.uniform(0.01, 0.1, (K // 32, N)).astype(np.float32), "s")]
    if zero_point:
        inits.append(helper.make_tensor("z", dtype, [K // 32, N], zero.reshape(-1).tolist()))
    for t in inits:  # raw bytes, as a written file holds them
        if t.data_type == dtype:
            raw = onnx.numpy_helper.to_array(t).astype(np.int8).reshape(-1) & 15
            t.ClearField("int32_data")
            t.raw_data = (raw[0::2] | (raw[1::2] << 4)).astype(np.uint8).tobytes()
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"][:2 + zero_point], ["wf"], axis=0, block_size=32),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(nibbles, "MIN_ROWS", 1)
    monkeypatch.setattr(nibbles, "_THREAD_COLUMNS", 0)


@pytest.mark.parametrize("dtype,zero_point", [(TensorProto.UINT4, True), (TensorProto.UINT4, False),
                                              (TensorProto.INT4, True)])
def test_a_4bit_weight_runs_over_its_nibbles_and_computes_the_same(tmp_path, small, dtype, zero_point):
    path = tmp_path / "m.onnx"
    onnx.save(_model(dtype, zero_point), str(path))
    twinned = twin_graph(onnx.load(str(path)))
    ops = [n.op_type for n in twinned.graph.node]
    assert ops.count("DequantizeLinear") == 2 and "BitwiseAnd" in ops and "BitShift" in ops
    assert ("BitwiseXor" in ops) == (dtype == TensorProto.INT4)  # a signed nibble offset by 8
    assert {t.name: (t.data_type, list(t.dims)) for t in twinned.graph.initializer}["w"] == \
        (TensorProto.UINT8, [K, N // 2])  # the same bytes, read as uint8
    plain = sessions.session(path, fold_constants=False, streamed=True)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((rows, K)).astype(np.float32)} for rows in (3, 2)]
    both = sessions.session(path, fold_constants=False, streamed=True, twins=2)
    for f, outputs in zip(feeds, split_outputs(both.run(outputs_of(["y"], 2), joined_feeds(feeds)), 2)):
        np.testing.assert_array_equal(plain.run(["y"], f)[0], outputs[0])


def test_what_keeps_dequantize_linear(tmp_path, small, monkeypatch):
    """int4 without zero points (no offset form), a weight too narrow for MLAS's rule, a weight
    read twice: the 4-bit DequantizeLinear stays."""
    def kept(model, count=1):
        return sum(n.op_type == "DequantizeLinear" for n in twin_graph(model).graph.node) == count

    assert kept(_model(TensorProto.INT4, False))
    shared = _model(TensorProto.UINT4, True)  # the same weight dequantized for a second MatMul
    shared.graph.node.extend([helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf2"], axis=0, block_size=32),
                              helper.make_node("MatMul", ["x", "wf2"], ["y2"])])
    shared.graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["b", N]))
    assert kept(shared, 2)
    monkeypatch.setattr(nibbles, "_THREAD_COLUMNS", N)
    assert kept(_model(TensorProto.UINT4, True))
