"""The passes on a gs.Graph, as a TensorRT-prep script calls them: import_graph, the passes,
gs's fold_constants, finish. Outputs checked in onnxruntime from the saved file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from conftest import run
from onnxsurgery import QuantOptions, UnsupportedModelError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gs")
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_encoder.py"), "--out", str(folder),
                    "--layers", "2", "--hidden", "64", "--only", "shared"], check=True, capture_output=True)
    return folder / "encoder_shared.onnx"


def _prep(src: Path, out: Path, exclude, **options) -> onnxsurgery.PassReport:
    """The realistic order: load, fold, onnxsurgery's passes, fold again, export."""
    graph = onnxsurgery.import_graph(src)
    graph.fold_constants()
    onnxsurgery.merge_duplicate_constants(graph)
    report = onnxsurgery.quantize_weights(graph, **options)
    graph.fold_constants(should_exclude_node=exclude)
    onnxsurgery.save_model(onnxsurgery.finish(graph), out)
    return report


@pytest.mark.parametrize("options", [{}, {"lowering": "arith"}, {"fp16": True},
                                     {"dtype": "uint8", "lowering": "arith"}],
                         ids=["default", "arith-blocks", "fp16", "uint8-arith"])
def test_fold_constants_with_the_predicate_keeps_the_weights_small(encoder, tmp_path, options):
    by_cli = tmp_path / "cli.onnx"
    onnxsurgery.quant_file(encoder, by_cli, verify=False, **options)
    report = _prep(encoder, tmp_path / "kept.onnx", onnxsurgery.keeps_weights_small, **options)
    assert report.changed > 0
    kept = (tmp_path / "kept.onnx").stat().st_size
    assert kept <= by_cli.stat().st_size * 1.02
    result = onnxsurgery.compare(encoder, tmp_path / "kept.onnx")
    assert result["rel_l2_error"] < 0.05
    assert _float32_weights(tmp_path / "kept.onnx") == _float32_weights(by_cli)
    # the trap the predicate avoids: gs folds the dequantization back into float32 weights
    _prep(encoder, tmp_path / "folded.onnx", None, **options)
    assert _float32_weights(tmp_path / "folded.onnx") > _float32_weights(by_cli)
    assert (tmp_path / "folded.onnx").stat().st_size > kept


def _float32_weights(path: Path) -> int:
    """float32 initializers large enough for quant to take (its default --min-elements)."""
    return sum(1 for t in onnx.load(str(path)).graph.initializer
               if t.data_type == onnx.TensorProto.FLOAT and np.prod(t.dims) >= 4096)


def _overridable_model() -> onnx.ModelProto:
    """x @ w @ w2, where w (a default the caller may override: listed as an input too) and w2
    hold the same values."""
    w = builders.rand((64, 64), 1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[2, 64]), builders.vi("w", shape=[64, 64])],
                          [builders.vi("y", shape=[2, 64])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w.copy(), "w2")])


def test_overridable_initializers_are_kept_and_left_alone(tmp_path):
    model = _overridable_model()
    assert [t.name for t in gs.import_onnx(model).inputs] == ["x"]  # gs's import loses it
    graph = onnxsurgery.import_graph(model)
    assert [t.name for t in graph.inputs] == ["x", "w"]
    merged = onnxsurgery.merge_duplicate_constants(graph, min_elements=1)
    quantized = onnxsurgery.quantize_weights(graph, min_elements=1)
    assert merged.changed == 0
    assert quantized.changed == 1  # w2 only
    out = tmp_path / "out.onnx"
    onnxsurgery.save_model(onnxsurgery.finish(graph), out)
    saved = onnx.load(str(out))
    assert [i.name for i in saved.graph.input] == ["x", "w"]
    assert "w" in {t.name for t in saved.graph.initializer}
    x = builders.rand((2, 64), 7)
    other_w = builders.rand((64, 64), 8)
    expected = run(model, {"x": x, "w": other_w})[0]
    got = run(out, {"x": x, "w": other_w})[0]  # the caller's w is used, quantized w2 after it
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 0.02


def test_finish_writes_an_outer_constant_once(tmp_path):
    model = builders.if_and_loop_subgraphs()
    graph = onnxsurgery.import_graph(model)
    onnxsurgery.merge_duplicate_constants(graph, min_elements=1)
    ours = onnxsurgery.finish(graph)
    theirs = gs.export_onnx(graph)
    assert ours.ByteSize() < theirs.ByteSize()
    onnxsurgery.save_model(ours, tmp_path / "ours.onnx")
    for seed in (0, 1):
        feeds = builders.feeds_for(model, seed)
        assert [a.tobytes() for a in run(model, feeds)] == [b.tobytes() for b in run(tmp_path / "ours.onnx", feeds)]


@pytest.mark.parametrize("options", [{"granularity": "row"}, {"lowering": "fast"}, {"dtype": "int9"},
                                     {"target": "tensorrt-ish"}, {"block_size": 1}, {"levels": 1},
                                     {"min_elements": 0}])
def test_unknown_options_raise_naming_the_choices(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        QuantOptions(**options)
    graph = onnxsurgery.import_graph(_overridable_model())
    with pytest.raises(ValueError):
        onnxsurgery.quantize_weights(graph, **options)


def test_a_scheme_the_opset_cannot_express_is_refused_with_the_opset_it_needs():
    graph = onnxsurgery.import_graph(_overridable_model())  # opset of builders.model
    assert graph.opset < 21
    with pytest.raises(UnsupportedModelError, match="opset 21"):
        onnxsurgery.quantize_weights(graph, dtype="int4")


def test_keeps_weights_small_picks_only_nodes_that_widen_stored_weights():
    weight = gs.Constant("q", np.zeros((64, 64), np.int8))
    table = gs.Constant("shape", np.array([1, 64], np.int64))
    half = gs.Constant("h", np.zeros((64, 64), np.float16))
    tiny = gs.Constant("zp", np.zeros((4,), np.int8))
    x = gs.Variable("x", dtype=np.float32)
    assert onnxsurgery.keeps_weights_small(gs.Node("Cast", inputs=[weight], outputs=[gs.Variable("a")]))
    assert onnxsurgery.keeps_weights_small(gs.Node("Cast", inputs=[half], outputs=[gs.Variable("b")]))
    assert not onnxsurgery.keeps_weights_small(gs.Node("Reshape", inputs=[x, table], outputs=[gs.Variable("c")]))
    assert not onnxsurgery.keeps_weights_small(gs.Node("Sub", inputs=[x, tiny], outputs=[gs.Variable("d")]))


def test_import_graph_without_overridable_initializers_gives_the_inputs_as_they_are():
    """import_graph on a ModelProto with no overridable initializers gives gs's inputs as they are."""
    model = builders.duplicate_initializers()
    assert [t.name for t in onnxsurgery.import_graph(model).inputs] == [i.name for i in model.graph.input]


def _outputs(path, feeds):
    return [a.tobytes() for a in run(path, feeds)]


def _encoder_feeds(encoder):
    from onnxsurgery.running.feeds import make_inputs
    from onnxsurgery.running.sessions import session

    return make_inputs(session(encoder), model=encoder)


# pass on the gs.Graph, CLI command doing the same to the file
_INTEROP = {
    "merge_duplicate_constants": (lambda g: onnxsurgery.merge_duplicate_constants(g), ["shrink"]),
    "merge_transposed_constants": (lambda g: (onnxsurgery.merge_duplicate_constants(g),
                                              onnxsurgery.merge_transposed_constants(g)), ["shrink", "--transposed"]),
    "narrow_constants": (lambda g: (onnxsurgery.merge_duplicate_constants(g), onnxsurgery.narrow_constants(g)),
                         ["shrink", "--narrow"]),
    "quantize_weights(target=tensorrt)": (lambda g: (onnxsurgery.quantize_weights(g, target="tensorrt"),
                                                     onnxsurgery.narrow_constants(g)),  # as the CLI does
                                          ["quant", "--target", "tensorrt", "--no-merge", "--no-verify"]),
    # symmetry pinned: left open, the CLI measures it on the model's inputs, a gs graph in the weights
    "quantize_weights(lowering=arith)": (lambda g: onnxsurgery.quantize_weights(g, lowering="arith", symmetric=False),
                                         ["quant", "--lowering", "arith", "--asymmetric", "--no-merge", "--no-verify"]),
}


@pytest.mark.parametrize("name", list(_INTEROP))
def test_each_pass_through_gs_export_computes_what_the_cli_writes(encoder, tmp_path, name):
    """The pass on a gs.Graph, exported with gs's own export_onnx, and the CLI on the file:
    bit-identical outputs in onnxruntime, and the same constants by bytes."""
    from click.testing import CliRunner

    from onnxsurgery.cli import main

    apply, command = _INTEROP[name]
    graph = onnxsurgery.import_graph(encoder)
    apply(graph)
    graph.cleanup().toposort()
    via_gs = tmp_path / "gs.onnx"
    onnx.save(gs.export_onnx(graph), str(via_gs))
    via_cli = tmp_path / "cli.onnx"
    result = CliRunner().invoke(main, ["-q", command[0], str(encoder), str(via_cli), *command[1:]])
    assert result.exit_code == 0, result.output
    feeds = _encoder_feeds(encoder)
    assert _outputs(via_gs, feeds) == _outputs(via_cli, feeds)

    def constants(path):
        m = onnx.load(str(path))
        return sorted(numpy_helper.to_array(t).tobytes() for t in m.graph.initializer) + sorted(
            numpy_helper.to_array(a.t).tobytes() for n in m.graph.node if n.op_type == "Constant"
            for a in n.attribute if a.name == "value")

    assert constants(via_gs) == constants(via_cli)


def test_constants_to_npy_and_embed_npy_match_the_cli_and_round_trip(encoder, tmp_path):
    from click.testing import CliRunner

    from onnxsurgery.cli import main

    graph = onnxsurgery.import_graph(encoder)
    onnxsurgery.merge_duplicate_constants(graph)
    report = onnxsurgery.constants_to_npy(graph, tmp_path / "gs.onnx", min_bytes=4096)
    onnxsurgery.save_model(onnxsurgery.finish(graph), tmp_path / "gs.onnx")
    assert report.changed == len(report.details["inputs"]) > 0
    result = CliRunner().invoke(main, ["-q", "npy", str(encoder), str(tmp_path / "cli.onnx"), "--min-bytes", "4096"])
    assert result.exit_code == 0, result.output
    gs_manifest = json.loads((tmp_path / "gs.npy.json").read_text())["inputs"]
    cli_manifest = json.loads((tmp_path / "cli.npy.json").read_text())["inputs"]
    assert {k: v["sha256"] for k, v in gs_manifest.items()} == {k: v["sha256"] for k, v in cli_manifest.items()}
    feeds = _encoder_feeds(encoder)
    reference = _outputs(encoder, feeds)
    assert [a.tobytes() for a in onnxsurgery.run_model(tmp_path / "gs.onnx", feeds).values()] == reference

    back = onnxsurgery.import_graph(tmp_path / "gs.onnx")
    embedded = onnxsurgery.embed_npy(back, tmp_path / "gs.onnx")
    assert embedded.changed == report.changed
    onnxsurgery.save_model(onnxsurgery.finish(back), tmp_path / "back.onnx")
    assert [i.name for i in onnx.load(str(tmp_path / "back.onnx")).graph.input] == \
        [i.name for i in onnx.load(str(encoder)).graph.input]
    assert _outputs(tmp_path / "back.onnx", feeds) == reference
