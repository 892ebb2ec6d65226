"""`shrink` on the skimmed proto (api/shrink_direct.py) writes what the graph's path writes, byte
for byte, with the same report; it is taken for ALBERT-like models (no gs workspace loaded) and
left for anything it does not cover."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from conftest import builders
from test_shrink_imports import _probe

from onnxsurgery import api
from onnxsurgery.api import shrink_direct

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples"))
from make_encoder import build as build_encoder  # noqa: E402


def _both(src: Path, tmp_path: Path, monkeypatch, **options) -> tuple[dict, dict, bool]:
    """(direct report, graph report, whether the direct path was taken), with both outputs
    checked byte for byte."""
    taken = []
    real = shrink_direct.DirectShrink.shrink

    def spying(self):
        ws = real(self)
        taken.append(ws is not None)
        return ws

    monkeypatch.setattr(shrink_direct.DirectShrink, "shrink", spying)
    direct = api.shrink_file(src, tmp_path / "a" / "out.onnx", **options).to_dict()
    monkeypatch.setattr(shrink_direct, "direct_shrink", lambda *a, **k: None)
    graph = api.shrink_file(src, tmp_path / "b" / "out.onnx", **options).to_dict()
    for f in (tmp_path / "b").iterdir():
        assert (tmp_path / "a" / f.name).read_bytes() == f.read_bytes(), f.name
    for report in (direct, graph):
        report.pop("output")
    return direct, graph, taken == [True]


@pytest.fixture
def out_dirs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return tmp_path


@pytest.mark.parametrize("half", [True, False])
def test_shared_encoder_same_bytes_and_report(out_dirs, save, monkeypatch, half):
    src = save(build_encoder(layers=3, hidden=64, shared=True, vocab=500))
    direct, graph, taken = _both(src, out_dirs, monkeypatch, half=half)
    assert taken
    assert direct == graph
    assert direct["passes"][1]["changed"] == 2 * 16  # 16 weights of the layer, twice more
    names = ["shape_only", "merge_duplicates", "cast_weights", "half_width"]
    assert [p["name"] for p in direct["passes"]] == names[:4 if half else 3]


def test_nodes_out_of_order_are_sorted_as_gs_sorts_them(out_dirs, save, monkeypatch):
    m = builders.duplicate_initializers(n_copies=4)
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(reversed(nodes))  # a valid model only once sorted
    direct, graph, taken = _both(save(m), out_dirs, monkeypatch)
    assert taken and direct == graph
    written = onnx.load(out_dirs / "a" / "out.onnx")
    assert [n.output[0] for n in written.graph.node] == ["h0", "h1", "h2", "h3", "y"]
    assert [t.name for t in written.graph.initializer] == ["W3"]  # the first read in the file's order


def test_diamond_and_multi_output_nodes(out_dirs, save, monkeypatch):
    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 7
    inits = [numpy_helper.from_array(w, n) for n in ("A", "B", "C")]
    nodes = [helper.make_node("Split", ["x"], ["s0", "s1"], axis=0, num_outputs=2),
             helper.make_node("MatMul", ["s1", "C"], ["c"]),
             helper.make_node("MatMul", ["s0", "A"], ["a"]),
             helper.make_node("Concat", ["a", "c"], ["ac"], axis=0),
             helper.make_node("MatMul", ["ac", "B"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [4, 8])],
                                            [helper.make_tensor_value_info("y", 1, [4, 8])], inits),
                          opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    direct, graph, taken = _both(save(m), out_dirs, monkeypatch)
    assert taken and direct == graph


@pytest.mark.parametrize("what", ["constant", "exact", "exact_in_file", "dead", "value_info", "shape", "input",
                                  "info_of_input", "info_of_output", "info_twice", "info_not_a_tensor"])
def test_left_to_the_graph(out_dirs, save, monkeypatch, what):
    m = builders.duplicate_initializers(size=64 if what == "exact_in_file" else 16)
    g = m.graph
    if what == "constant":  # a Constant node the merge could take
        g.node.insert(0, helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
            np.ones(32, np.float32), "k")))
        g.node.append(helper.make_node("Add", ["y", "k"], ["unused"]))
        g.output.append(helper.make_tensor_value_info("unused", 1, None))
    elif what.startswith("exact"):  # values float16 holds: half_width stores them (found once the
        # payloads are read; in_file: 16 KB, a view of the file's mapping, which must still close)
        for t in g.initializer:
            t.raw_data = np.full(len(t.raw_data) // 4, 0.5, np.float32).tobytes()
    elif what == "dead":
        g.node.append(helper.make_node("Relu", ["h0"], ["nobody"]))
    elif what == "value_info":  # one with a denotation gs drops
        g.value_info.append(helper.make_tensor_value_info("h0", 1, [2, 16], shape_denotation=["BATCH", ""]))
    elif what == "info_of_input":  # gs reads it into the input's type
        g.value_info.append(helper.make_tensor_value_info("x", 1, [2, "n"]))
    elif what == "info_of_output":
        g.value_info.append(helper.make_tensor_value_info("y", 1, [2, "n"]))
    elif what == "info_twice":  # gs merges the two
        g.value_info.extend([helper.make_empty_tensor_value_info("h0"), helper.make_tensor_value_info("h0", 1, None)])
    elif what == "info_not_a_tensor":
        g.value_info.append(helper.make_tensor_sequence_value_info("h0", 1, [2, 16]))
    elif what == "shape":
        g.node.append(helper.make_node("Shape", ["W1"], ["w1_shape"]))
        g.output.append(helper.make_tensor_value_info("w1_shape", 7, [2]))
    else:
        g.input.append(helper.make_tensor_value_info("W2", 1, [16, 16]))
    direct, graph, taken = _both(save(m), out_dirs, monkeypatch)
    assert not taken
    assert direct == graph


def test_value_info_shape_of_values_and_small_tensor_attributes(out_dirs, save, monkeypatch):
    """value_info as the exporter writes it (a merged initializer's dropped, the rest in the sorted
    nodes' order), Shape of a computed value, a ConstantOfShape's value: taken, the same bytes."""
    m = builders.duplicate_initializers(n_copies=4)
    g = m.graph
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(reversed(nodes))  # the value_info's order follows the sorted nodes
    g.node.extend([helper.make_node("Shape", ["h1"], ["s"]),
                   helper.make_node("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(
                       np.array([0.5], np.float32))),  # no name: gs writes an empty one
                   helper.make_node("Add", ["y", "z"], ["out"])])
    g.output.append(helper.make_tensor_value_info("out", 1, [2, 16]))
    g.value_info.extend([helper.make_tensor_value_info("h2", 1, [2, None]),  # a dimension of neither kind
                         helper.make_tensor_value_info("W3", 1, [16, 16]),  # merged: dropped
                         helper.make_tensor_value_info("h0", 10, ["batch", 16]),
                         helper.make_tensor_value_info("s", 7, [2]),
                         helper.make_tensor_value_info("z", 1, None),
                         helper.make_tensor_value_info("ghost", 1, [3]),
                         helper.make_tensor_value_info("out", 1, [2, 16]),  # as declared: dropped
                         helper.make_tensor_value_info("x", 1, [2, 16])])  # nothing makes it: dropped
    g.node[0].doc_string = "gs drops a node's doc string"
    g.node[1].metadata_props.add(key="k", value="and its metadata")
    direct, graph, taken = _both(save(m), out_dirs, monkeypatch)
    assert taken and direct == graph
    written = onnx.load(out_dirs / "a" / "out.onnx")
    assert [v.name for v in written.graph.value_info] == ["h0", "h2", "s", "z"]


def test_shrink_of_an_albert_like_model_loads_no_graph(save, tmp_path):
    src = save(build_encoder(layers=2, hidden=64, shared=True, vocab=500))
    modules = set(_probe(tmp_path, "-q", "shrink", src, tmp_path / "o.onnx")["modules"])
    assert "onnxsurgery.api.shrink_direct" in modules and (tmp_path / "o.onnx").is_file()
    # gs itself still loads (storage/lazy.py's file-backed values), 6 ms: not its graph's work
    assert not modules & {"onnxsurgery.pipeline", "onnxsurgery.passes.merge_constants", "onnxsurgery.export"}


def test_the_path_taken_is_said_under_verbose(save, tmp_path, caplog):
    m = builders.duplicate_initializers(n_copies=3)
    src = save(m)
    with caplog.at_level("INFO", logger="onnxsurgery"):
        api.shrink_file(src, tmp_path / "a.onnx")
        api.shrink_file(src, tmp_path / "b.onnx", transposed=True)
        m.graph.node.append(helper.make_node("Shape", ["W1"], ["w1_shape"]))
        m.graph.output.append(helper.make_tensor_value_info("w1_shape", 7, [2]))
        api.shrink_file(save(m), tmp_path / "c.onnx")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("shrink: ")]
    assert said == ["shrink: on the proto, no graph (its only change: merging initializers)",
                    "shrink: the graph's path (transposed asked for)",
                    "shrink: the graph's path (node : Shape of a constant)"]
