"""The verification's header names onnxruntime's DequantizeLinear -> MatMul fusion (MatMulNBits,
int8 activations) only where onnxruntime makes it: a 2-D weight per tensor or per output column,
not a 3-D one (a deep ensemble's batched MatMul, tglf_multimachine) nor one scaled per row. Each
case is checked against the session's own optimized graph."""

from __future__ import annotations


import numpy as np
import onnx
import pytest
from builders import fused_by_onnxruntime, model, vi
from onnx import helper, numpy_helper

from onnxsurgery.running.verify import runtime_label

FUSED = "fused into MatMulNBits with int8 activations"


def dq_matmul(shape, scale_shape, axis=None) -> onnx.ModelProto:
    rng = np.random.RandomState(0)
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["w"], **attrs),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    lead = [2] if len(shape) == 2 else [shape[0], 2]
    return model(nodes, [vi("x", shape=[*lead, shape[-2]])], [vi("y", shape=[*lead, shape[-1]])],
                 [numpy_helper.from_array(rng.randint(-127, 127, shape).astype(np.int8), "q"),
                  numpy_helper.from_array(np.asarray(rng.rand(*scale_shape) * 0.01 + 0.001, np.float32), "s")])


@pytest.mark.parametrize("shape, scale_shape, axis, fused", [
    ((64, 32), (), None, True),  # per tensor
    ((64, 32), (32,), 1, True),  # per output column
    ((64, 32), (64,), 0, False),  # per row: left to run at each inference
    ((5, 64, 32), (32,), 2, False),  # 3-D, batched over an ensemble's members: never fused
])
def test_the_fusion_is_named_where_onnxruntime_makes_it(tmp_path, shape, scale_shape, axis, fused):
    proto = dq_matmul(shape, scale_shape, axis)
    assert fused_by_onnxruntime(proto, tmp_path) is fused
    label = runtime_label("onnxruntime", proto)
    assert (FUSED in label) is fused, label
    assert label.startswith("onnxruntime ") and "default graph optimizations" in label


def test_a_weight_two_matmuls_read_is_fused_into_neither(tmp_path):
    """One DequantizeLinear read by two MatMuls (a layer shared by two places, as ALBERT's)."""
    proto = dq_matmul((64, 32), (32,), 1)
    proto.graph.node.append(helper.make_node("MatMul", ["x2", "w"], ["y2"]))
    proto.graph.input.append(vi("x2", shape=[2, 64]))
    proto.graph.output.append(vi("y2", shape=[2, 32]))
    assert not fused_by_onnxruntime(proto, tmp_path)
    assert FUSED not in runtime_label("onnxruntime", proto)


@pytest.mark.parametrize("bias_shape, fused", [((32,), True), ((1, 32), False)])
def test_a_matmul_with_a_two_d_bias_becomes_a_float_gemm(tmp_path, bias_shape, fused):
    """MatMul then Add of a [1, N] bias, A of rank 2: onnxruntime makes a Gemm first and the
    DequantizeLinear stays (magika_v3's Dense_1, int4); a bias of shape [N] is fused."""
    proto = dq_matmul((64, 32), (32,), 1)
    proto.graph.node[1].output[0] = "m"
    proto.graph.node.append(helper.make_node("Add", ["m", "b"], ["y"]))
    proto.graph.initializer.append(numpy_helper.from_array(np.ones(bias_shape, np.float32), "b"))
    assert fused_by_onnxruntime(proto, tmp_path) is fused
    assert (FUSED in runtime_label("onnxruntime", proto)) is fused


def dense(tail: list[str], bias=True, a_shape=(2, 64), relu_is_output=False) -> onnx.ModelProto:
    """x -> MatMul(DequantizeLinear per column) [-> Add of a bias of shape [N]] -> tail ops, one after
    another: a tf2onnx Dense layer and what reads it."""
    proto = dq_matmul((64, 32), (32,), 1)
    g = proto.graph
    g.input[0].CopyFrom(vi("x", shape=list(a_shape)))
    g.node[1].output[0], last = "m", "m"
    if bias:
        g.node.append(helper.make_node("Add", ["m", "b"], ["z"]))
        g.initializer.append(numpy_helper.from_array(np.full(32, 0.5, np.float32), "b"))
        last = "z"
    for i, op in enumerate(tail):
        g.node.append(helper.make_node(op, [last], [f"t{i}"]))
        last = f"t{i}"
    del g.output[:]
    shape = [*a_shape[:-1], 32]
    g.output.append(vi(last, shape=shape))
    if relu_is_output:
        g.output.append(vi("t0", shape=shape))
    onnx.checker.check_model(proto)
    return proto


@pytest.mark.parametrize("tail, bias, a_shape, relu_is_output, fused", [
    (["Relu", "Sigmoid"], True, (2, 64), False, False),  # tumor_vgg16, capspot_siamese: FusedGemm, DQ kept
    (["Relu", "Sigmoid"], False, (2, 64), False, False),  # no bias: the MatMul itself waits for a Q
    (["Clip", "Sigmoid"], True, (2, 64), False, False),
    (["Relu"], True, (2, 64), False, True),  # the Relu writes a graph output: no Q expected
    (["Relu", "Sigmoid"], True, (2, 64), True, True),  # read by Sigmoid and a graph output
    (["Sigmoid", "Tanh"], True, (2, 64), False, True),  # not an activation a Q makes redundant
    (["Relu", "Sigmoid"], True, (2, 3, 64), False, True),  # a Reshape after the Gemm, not the Relu
    (["Relu", "Sigmoid"], True, ("n", 3, 64), False, True),  # no Gemm: the Add follows the MatMul
])
def test_a_matmul_whose_relu_awaits_a_quantizelinear_is_not_fused(tmp_path, tail, bias, a_shape,
                                                                    relu_is_output, fused):
    """onnxruntime's QDQ fusion takes a node read only by a Relu or Clip (read once, not a graph
    output) for a quantized activation's, waiting for its QuantizeLinear: the DequantizeLinear stays,
    the MatMul and Add become a FusedGemm with the Relu, in float."""
    proto = dense(tail, bias, a_shape, relu_is_output)
    assert fused_by_onnxruntime(proto, tmp_path) is fused
    assert (FUSED in runtime_label("onnxruntime", proto)) is fused


def test_a_gemm_reading_a_dequantized_b_before_a_relu_is_not_fused(tmp_path):
    proto = dense(["Relu", "Sigmoid"], bias=False)
    gemm = proto.graph.node[1]
    gemm.op_type = "Gemm"
    gemm.input.append("c")
    proto.graph.initializer.append(numpy_helper.from_array(np.full(32, 0.5, np.float32), "c"))
    assert not fused_by_onnxruntime(proto, tmp_path)
    assert FUSED not in runtime_label("onnxruntime", proto)
    proto.graph.node.pop()  # the Relu now writes the graph output: MatMulNBits with its bias
    proto.graph.output[0].name = "t0"
    assert fused_by_onnxruntime(proto, tmp_path)
    assert FUSED in runtime_label("onnxruntime", proto)
