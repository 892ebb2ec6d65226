"""Weights stored in a Loop body stay out of the memory rule (zero_points.read_in_loop), and a
lean Conv's zero points are computed by Convs (lowerings/conv_zero_point.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.graph_utils import collect_constants, iter_scopes
from onnxsurgery.quantization.choices.load_memory import kept_in_memory
from onnxsurgery.quantization.lowerings.zero_points import read_in_loop, zero_points_tried
import builders


def _sites(model):
    graph = gs.import_onnx(model)
    return {s.name: s for s in collect_constants(graph, list(iter_scopes(graph)))}


def test_only_weights_stored_in_a_loop_body_count_as_read_in_it():
    """The body's own Constant is read at every step; the outer W (read by the If's branch) and
    the else-branch's initializer (an If runs once) are not in a Loop body."""
    sites = _sites(builders.if_and_loop_subgraphs())
    assert read_in_loop(sites["body_W"])
    assert not read_in_loop(sites["W"]) and not read_in_loop(sites["else_W"])
    assert zero_points_tried(sites["body_W"], "arith") and not zero_points_tried(sites["else_W"], "arith")


def test_memory_rule_keeps_no_weight_stored_in_a_loop_body():
    """Planned as lean `arith` (whose estimate asks for something to be kept), the body's weight
    is never the one kept as DequantizeLinear; the same weight outside a body is."""
    sites = _sites(builders.if_and_loop_subgraphs())
    assert kept_in_memory([(sites["body_W"], "arith")]) == []
    assert kept_in_memory([(sites["else_W"], "arith")]) == [sites["else_W"]]


def _strided_offset_conv() -> onnx.ModelProto:
    """A 3x3 Conv with strides, pads and dilations, its output channels each on an offset."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((48, 24, 3, 3)) * 0.05 + rng.standard_normal((48, 1, 1, 1)) * 0.2
    b = rng.standard_normal(48) * 0.1
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[2, 1, 2, 1], strides=[2, 1], dilations=[2, 1])]
    return builders.model(nodes, [builders.vi("x", shape=[1, 24, 20, 18])], [builders.vi("y", shape=[1, 48, 10, 18])],
                          [numpy_helper.from_array(w.astype(np.float32), "W"),
                           numpy_helper.from_array(b.astype(np.float32), "B")], opset=17)


def test_conv_zero_points_run_as_convs_and_compute_the_original(tmp_path):
    """--lowering scaled --asymmetric on a strided, padded, dilated Conv: no ReduceSum, Sub or
    DequantizeLinear, three Convs for the term (channels, window, zero points), and the output
    within the asymmetric form's error (well under the symmetric one: a wrong window or offset would be far off)."""
    model = _strided_offset_conv()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    asym = onnxsurgery.quant_file(src, tmp_path / "asym.onnx", min_elements=1024, lowering="scaled", symmetric=False)
    sym = onnxsurgery.quant_file(src, tmp_path / "sym.onnx", min_elements=1024, lowering="scaled", symmetric=True)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "asym.onnx")).graph.node]
    assert ops.count("Conv") == 1 + 3 and not {"ReduceSum", "Sub", "DequantizeLinear"} & set(ops)
    x = builders.feeds_for(model)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, x)[0]
    out = ort.InferenceSession(str(tmp_path / "asym.onnx"), providers=["CPUExecutionProvider"]).run(None, x)[0]
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    assert out.shape == ref.shape and abs(err - asym.verification["rel_l2_error"]) < 1e-3 * err
    assert err < 0.7 * sym.verification["rel_l2_error"] and err < 0.01
