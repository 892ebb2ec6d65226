"""A weighted 4-bit weight's clipping search runs once per way measured (choices/planning.py's
Planning.plan): the plan's importance arrays are the measurement's own objects, by which
quantize.py's `remembering` finds the picks again when the plan is applied. Copied with the
plan, every weighted weight was searched again in the pass (vit_focus: a third of its search)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery.quantization.rounding as rounding
from onnxsurgery import quant_file


def _layer_norm_matmul(k: int = 256, n: int = 256) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 2.0, k).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.normal(0, 0.1, k).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.normal(0, 0.05, (k, n)).astype(np.float32), "w")]
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], axis=-1),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_weighted_search_is_not_run_again_when_applied(tmp_path, monkeypatch):
    path = tmp_path / "in.onnx"
    onnx.save(_layer_norm_matmul(), str(path))
    searched = []
    search = rounding._clip_ranges

    def counted(x, *args, **kwargs):
        searched.append((x.shape, args[4], kwargs.get("importance", args[9] if len(args) > 9 else None) is not None))
        return search(x, *args, **kwargs)

    monkeypatch.setattr(rounding, "_clip_ranges", counted)
    report = quant_file(path, tmp_path / "out.onnx", dtype="int4", min_elements=1024, verify=False)
    assert [w["name"] for w in report.weights if w["dtype"] == "int4"] == ["w"]
    # measured symmetric and asymmetric, each searched weighted by the input's energy; applied: taken again
    assert sorted(s for _, s, _ in searched) == [False, True], searched
    assert all(weighted for *_, weighted in searched), searched
