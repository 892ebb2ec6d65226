"""Pipelines as data: each step estimates what it would do without changing the graph, and the
estimate is what it then does; `info`, the API, the CLI and gs scripts run the same lists."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from conftest import run
from onnxsurgery import QuantOptions, estimate_pipeline, quant_pipeline, run_pipeline, shrink_pipeline
from onnxsurgery.cli import main
from onnxsurgery.passes.merge_constants import MergeDuplicates
from onnxsurgery.passes.merge_reshaped import MergeReshaped
from onnxsurgery.passes.merge_transposed import MergeTransposed
from onnxsurgery.passes.narrow_types import Narrow
from onnxsurgery.passes.quantize_weights import QuantizeWeights
from onnxsurgery.passes.shape_only import FoldShapeOnly


def _graph_bytes(graph) -> bytes:
    import onnx_graphsurgeon as gs

    return gs.export_onnx(graph.copy()).SerializeToString()


_STEPS = {
    "merge_duplicates": (MergeDuplicates(), builders.duplicate_initializers),
    "merge_transposed": (MergeTransposed(), builders.transposed_pair),
    "shape_only": (FoldShapeOnly(), builders.tf2onnx_shape_copies),
    "merge_reshaped": (MergeReshaped(), builders.tf2onnx_shape_copies),
    "narrow": (Narrow(), builders.narrowing_cases),
    "quantize int8": (QuantizeWeights(QuantOptions(lowering="arith")), builders.quant_cases),
    "quantize int4": (QuantizeWeights(QuantOptions(dtype="int4")), lambda: builders.quant_cases(opset=21, ir=10)),
    "quantize fp16": (QuantizeWeights(QuantOptions(fp16=True)), builders.quant_cases),
    "quantize tensorrt": (QuantizeWeights(QuantOptions(target="tensorrt", min_elements=1024)),
                          lambda: builders.tensorrt_prep_model(opset=13)),
}


@pytest.mark.parametrize("name", list(_STEPS))
def test_each_step_estimates_what_it_then_does_and_the_estimate_changes_nothing(name):
    step, build = _STEPS[name]
    graph = onnxsurgery.import_graph(build())
    before = _graph_bytes(graph)
    estimate = step.estimate(graph, overridable=frozenset())
    assert _graph_bytes(graph) == before
    report = step.apply(graph, overridable=frozenset())
    assert report.bytes_saved > 0
    assert estimate.bytes_saved == report.bytes_saved, (estimate, report.bytes_saved)


def _twin_weights() -> onnx.ModelProto:
    """Two identical 64x64 MatMul weights: the merge removes one, so quantize sees one."""
    w = (builders.rand((64, 64), 3) * 0.1).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "A"], ["h"]), helper.make_node("MatMul", ["h", "B"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 64])],
                          [numpy_helper.from_array(w, "A"), numpy_helper.from_array(w.copy(), "B")])


def test_a_pipeline_estimate_leaves_out_what_an_earlier_step_removes():
    graph = onnxsurgery.import_graph(_twin_weights())
    options = QuantOptions(lowering="arith")
    merge, quantize = estimate_pipeline(graph, [MergeDuplicates(), QuantizeWeights(options)])
    (alone,) = estimate_pipeline(graph, [QuantizeWeights(options)])
    assert merge.bytes_saved == 64 * 64 * 4
    assert 0 < quantize.bytes_saved < alone.bytes_saved  # one weight left to quantize, not two
    reports = run_pipeline(graph, [MergeDuplicates(), QuantizeWeights(options)])
    assert [r.bytes_saved for r in reports] == [merge.bytes_saved, quantize.bytes_saved]


def test_steps_shared_by_pipelines_are_estimated_once():
    graph = onnxsurgery.import_graph(_twin_weights())
    memo: dict = {}
    first = estimate_pipeline(graph, shrink_pipeline(), memo=memo)
    second = estimate_pipeline(graph, quant_pipeline(QuantOptions()), memo=memo)
    assert second[1] is first[0] and second[2] is first[1]  # quant's shape-only and merge steps are shrink's
    assert len(memo) == 6  # shape-only and merge (shared), shrink's cast and half-width, bypass, quantize


@pytest.mark.parametrize("command, steps", [
    (["shrink", "--transposed", "--narrow"],
     lambda: shrink_pipeline(transposed=True, narrow=True)),
    (["quant", "--lowering", "arith", "--no-verify"],
     lambda: quant_pipeline(QuantOptions(lowering="arith"))),
], ids=["shrink", "quant"])
def test_the_cli_and_a_gs_script_run_the_same_pipeline(tmp_path, command, steps):
    """The same list of steps on a gs.Graph, finished and saved, gives the file the CLI writes."""
    m = builders.model(
        [*builders.transposed_pair().graph.node, helper.make_node("Gather", ["T", "ids"], ["t"], axis=0)],
        [builders.vi("ids", TensorProto.INT64, [1, 5])],
        [builders.vi("logits", shape=[1, 5, 40]), builders.vi("t", shape=[1, 5, 64])],
        [*builders.transposed_pair().graph.initializer,
         numpy_helper.from_array(np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096, "T")])
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    graph = onnxsurgery.import_graph(src)
    run_pipeline(graph, steps())
    via_script = tmp_path / "script.onnx"
    onnxsurgery.save_model(onnxsurgery.finish(graph), via_script)
    via_cli = tmp_path / "cli.onnx"
    result = CliRunner().invoke(main, ["-q", command[0], str(src), str(via_cli), *command[1:]])
    assert result.exit_code == 0, result.output
    script_model, cli_model = onnx.load(str(via_script)), onnx.load(str(via_cli))
    assert script_model.graph.SerializeToString() == cli_model.graph.SerializeToString()
    feeds = builders.feeds_for(m)
    assert all(np.array_equal(a, b) for a, b in zip(run(via_script, feeds), run(via_cli, feeds)))
