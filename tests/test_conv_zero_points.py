"""Zero points for lean int8 convolutions, as a form only (zero_points.CONV_ZERO_POINT_READERS), and
for lean DequantizeLinear weights (zero_points.zero_points_tried)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.graph_utils import collect_constants, iter_scopes
from onnxsurgery.quantization.choices import lean
from onnxsurgery.quantization.choices.candidate import Candidate
from onnxsurgery.quantization.options import QuantOptions, Scheme
import builders


def _offset_conv() -> onnx.ModelProto:
    """A 3x3 Conv whose output channels each sit on an offset: a symmetric range spends about
    half its levels on the side no value is on."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32, 3, 3)) * 0.05 + rng.standard_normal((64, 1, 1, 1)) * 0.2
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])]
    return builders.model(nodes, [builders.vi("x", shape=[1, 32, 16, 16])], [builders.vi("y", shape=[1, 64, 16, 16])],
                          [numpy_helper.from_array(w.astype(np.float32), "W")], opset=17)


def _costs(model, monkeypatch, tried: bool):
    if not tried:
        monkeypatch.setattr(lean, "conv_zero_points_tried", lambda *args: False)
    graph = gs.import_onnx(model)
    options = QuantOptions()
    candidates = [dataclasses.replace(Candidate(site, options), scheme=Scheme("block", 1, 32), lowering="lean")
                  for site in collect_constants(graph, list(iter_scopes(graph)))]
    (cost,) = lean.lean_costs(candidates, options, 17, None)
    monkeypatch.undo()
    return cost


def test_conv_zero_points_leave_the_lean_or_accurate_rank_as_it_was(monkeypatch):
    """Measured with zero points, the offset Conv weight takes them, and its rank against the
    accurate chain (and its float16 rank) stays the symmetric form's: no weight leaves the
    accurate chain or float16 for them."""
    model = _offset_conv()
    tried, untried = _costs(model, monkeypatch, True), _costs(model, monkeypatch, False)
    assert tried.asymmetric and not untried.asymmetric
    assert tried.ratio == untried.ratio and tried.error == untried.error and tried.ratio > 1.4


def test_auto_gives_offset_conv_zero_points_that_lower_its_error(tmp_path):
    """auto writes the offset Conv with zero points (a ReduceSum and a window Conv at run time):
    less error than symmetric on the model's output, and the plan says why. (--target
    onnxruntime: the memory rule would keep this lone weight as DequantizeLinear.)"""
    model = _offset_conv()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "auto.onnx", min_elements=1024, target="onnxruntime")
    q = report.pass_report("quantize").details
    assert q["lean_asymmetric"] == ["W"] and q["schemes"] == {"int8/channel/asym/scaled": 1}
    (record,) = [r for r in report.weights if r["name"] == "W"]
    assert "a convolution's: as a form only" in record["why"]
    symmetric = onnxsurgery.quant_file(src, tmp_path / "sym.onnx", min_elements=1024, target="onnxruntime",
                                       lowering="scaled", symmetric=True)
    assert report.verification["rel_l2_error"] < 0.7 * symmetric.verification["rel_l2_error"]
