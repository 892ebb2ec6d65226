"""The plan follows the fusion label's rule (running/nbits_fusion.py): a MatMul weight whose MatMul
(or the Gemm onnxruntime makes of it with its Add) is read only by a Relu or Clip is not fused into
MatMulNBits, as onnxruntime's QDQ fusion awaits a QuantizeLinear after the Relu. `--dtype int4`
then gives it the int8 path's form and says why (tumor_vgg16, capspot_siamese); the int8 default's
memory rule no longer counts it as fused. Each structure is checked against onnxruntime's own
optimized graph."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from builders import fused_by_onnxruntime, model, vi
from click.testing import CliRunner
from onnx import helper, numpy_helper

from onnxsurgery.cli import main
from onnxsurgery.graph_utils import collect_constants, iter_scopes
from onnxsurgery.quantization.choices.fusion_after import unfused_after
from onnxsurgery.quantization.choices.load_memory import fuses_into_nbits

N, K = 32, 256


def dense(tail: list[str], a_shape=(2, K), dq: bool = False, flatten: bool = False) -> onnx.ModelProto:
    """x -> [tf2onnx's Flatten: Reshape to a computed [-1, K]] -> MatMul(W) -> Add(b[N]) -> tail ops:
    a Dense layer and what reads it, the last tail op writing the output. With `dq`, W is a
    DequantizeLinear's output (per column), as the candidate holds it."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.full(N, 0.5, np.float32), "b")]
    nodes, x, inputs = [], "x", [vi("x", shape=list(a_shape))]
    if flatten:  # Shape -> Slice -> Concat -> Reshape: onnx's inference alone gives its output no rank
        inputs = [vi("x", shape=["n", 4, 4, K // 16])]
        nodes += [helper.make_node("Shape", ["x"], ["sh"]),
                  helper.make_node("Slice", ["sh", "st", "en", "st"], ["lead"]),
                  helper.make_node("Concat", ["lead", "k"], ["target"], axis=0),
                  helper.make_node("Reshape", ["x", "target"], ["flat"])]
        inits += [numpy_helper.from_array(np.array([0], np.int64), "st"),
                  numpy_helper.from_array(np.array([1], np.int64), "en"),
                  numpy_helper.from_array(np.array([K], np.int64), "k")]
        x = "flat"
    weight = rng.standard_normal((K, N)).astype(np.float32) * 0.1
    if dq:
        scale = np.abs(weight).max(axis=0) / 127
        inits += [numpy_helper.from_array(np.round(weight / scale).astype(np.int8), "q"),
                  numpy_helper.from_array(scale.astype(np.float32), "s")]
        nodes.append(helper.make_node("DequantizeLinear", ["q", "s"], ["W"], axis=1))
    else:
        inits.append(numpy_helper.from_array(weight, "W"))
    nodes += [helper.make_node("MatMul", [x, "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["z"])]
    last = "z"
    for i, op in enumerate(tail):
        nodes.append(helper.make_node(op, [last], [f"t{i}"]))
        last = f"t{i}"
    out = ["n", N] if flatten else [*a_shape[:-1], N]
    return model(nodes, inputs, [vi(last, shape=out)], inits, opset=21, ir=10)


def site_and_reader(proto: onnx.ModelProto):
    graph = gs.import_onnx(proto)
    site = next(s for s in collect_constants(graph, list(iter_scopes(graph))) if s.name == "W")
    return site, next(n for n in graph.nodes if n.op == "MatMul")


CASES = [
    (["Relu", "Sigmoid"], (2, K), False, False),  # tumor_vgg16's Dense + ReLU: FusedGemm, the DQ kept
    (["Clip", "Sigmoid"], (2, K), False, False),
    (["Relu", "Sigmoid"], (2, K), True, False),  # A's rank 2 only after a computed Reshape (tf2onnx's Flatten)
    (["Sigmoid", "Relu"], (2, K), False, True),  # the Add read by a Sigmoid: fused
    (["Relu"], (2, K), False, True),  # the Relu writes the graph output: no QuantizeLinear awaited
    (["Relu", "Sigmoid"], ("n", 3, K), False, True),  # A of rank 3: no Gemm, the Add follows the MatMul
]


@pytest.mark.parametrize("tail, a_shape, flatten, fused", CASES)
def test_the_planner_and_onnxruntime_agree_on_the_fusion(tmp_path, tail, a_shape, flatten, fused):
    assert fused_by_onnxruntime(dense(tail, a_shape, dq=True, flatten=flatten), tmp_path) is fused
    site, matmul = site_and_reader(dense(tail, a_shape, flatten=flatten))
    why = unfused_after(site, matmul)
    assert (why is None) is fused, why
    assert fuses_into_nbits(site) is fused  # the int8 default's memory rule (load_memory.py) asks the same
    if not fused:
        assert f"a {tail[0]} follows" in why and "runs at every inference" in why


def _plan(path, *args) -> dict[str, dict]:
    r = CliRunner().invoke(main, ["-q", "quant", str(path), "--dry-run", "--json", "--min-elements", "1024", *args])
    assert r.exit_code == 0, r.output
    return {w["name"]: w for w in json.loads(r.output)["weights"]}


@pytest.mark.parametrize("tail, fused", [(["Relu", "Sigmoid"], False), (["Sigmoid", "Relu"], True)])
def test_int4_gives_an_unfused_dense_weight_the_int8_form_and_says_why(tmp_path, tail, fused, int4_forms_alone):
    path = tmp_path / "in.onnx"
    onnx.save(dense(tail), str(path))
    record = _plan(path, "--dtype", "int4")["W"]
    if fused:
        assert (record["dtype"], record["lowering"]) == ("int4", "dq"), record
        return
    assert (record["dtype"], record["granularity"], record["lowering"]) == ("int8", "channel", "scaled"), record
    assert "not 4-bit" in record["why"] and "a Relu follows the Gemm onnxruntime makes" in record["why"], record
