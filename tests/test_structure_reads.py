"""Questions about a graph read it without its long list attributes (storage/skim.read_structure):
an ai.onnx.ml tree ensemble's tables cost protobuf about 6x their bytes parsed (luscinia's 194 MB
of trees: 1.16 GB), and `quant` of it parsed them 6 times, holding 4 of the copies at once. The
tests build a forest of 70,000 one-leaf trees in code (its lists 280-420 KB each)."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxsurgery import info, quant_file, shrink_file
from onnxsurgery.storage import skim

TREES = 70_000


def _forest(path, *, weight: bool = False):
    """A TreeEnsembleRegressor of TREES one-leaf trees, a Constant of 100,000 floats beside it,
    and with `weight` a MatMul by a 64x64 weight (a payload left in the file)."""
    weights = (np.arange(TREES) % 7 - 3).astype(np.float32) / 1000
    nodes = [helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["sum"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=list(range(TREES)), nodes_nodeids=[0] * TREES, nodes_featureids=[0] * TREES,
        nodes_modes=["LEAF"] * TREES, nodes_values=[0.0] * TREES, nodes_truenodeids=[0] * TREES,
        nodes_falsenodeids=[0] * TREES, target_treeids=list(range(TREES)), target_nodeids=[0] * TREES,
        target_ids=[0] * TREES, target_weights=weights.tolist(), post_transform="NONE"),
        helper.make_node("Constant", [], ["c"], value_floats=np.linspace(0, 1, 100_000).tolist()),
        helper.make_node("ReduceSum", ["c"], ["total"], keepdims=1)]
    outputs = [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [None, 1]),
               helper.make_tensor_value_info("total", TensorProto.FLOAT, [1])]
    inits = []
    if weight:
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y"]))
        outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 64]))
        inits.append(onnx.numpy_helper.from_array(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64), "w"))
    graph = helper.make_graph(nodes, "forest", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


def _attrs(model):
    return {a.name: a for a in model.graph.node[0].attribute}


def test_structure_leaves_the_tables_out_and_keeps_the_rest(tmp_path):
    path = _forest(tmp_path / "forest.onnx", weight=True)
    whole, structure = skim.read_model_skipping_weights(path), skim.read_structure(path)
    full, kept = _attrs(whole), _attrs(structure)
    assert list(full) == list(kept)  # every attribute, in its place, of its type
    assert all(full[n].type == kept[n].type for n in full)
    assert len(full["nodes_modes"].strings) == TREES and not kept["nodes_modes"].strings
    assert len(full["target_weights"].floats) == TREES and not kept["target_weights"].floats
    assert kept["n_targets"].i == 1 and kept["post_transform"].s == b"NONE"
    # a Constant's list is a value, not a table: kept whole
    assert len(structure.graph.node[1].attribute[0].floats) == 100_000
    assert structure.graph.node[1:] == whole.graph.node[1:]
    assert structure.graph.initializer == whole.graph.initializer  # the weight's reference into the file
    assert structure.ByteSize() < whole.ByteSize() // 2


def _full_reads(monkeypatch) -> list:
    """Each parse of a whole model (long lists and all) through the skim, from now on."""
    calls, read = [], skim._read

    def counted(path, *, structure):
        if not structure:
            calls.append(path)
        return read(path, structure=structure)

    monkeypatch.setattr(skim, "_read", counted)
    return calls


def test_info_reads_no_table(tmp_path, monkeypatch):
    path = _forest(tmp_path / "forest.onnx", weight=True)
    calls = _full_reads(monkeypatch)
    found = info(path)
    assert calls == []
    assert found["constants"] >= 1 and found["model_bytes"] == path.stat().st_size


def test_commands_on_a_forest_parse_it_once(tmp_path, monkeypatch):
    """No tensor to map: the verification's sessions load the file itself, and every question about
    the graph reads its structure; the one whole parse is the command's own workspace."""
    path = _forest(tmp_path / "forest.onnx")
    x = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    calls = _full_reads(monkeypatch)
    shrink_file(path, tmp_path / "shrunk.onnx", verify=True, samples=[{"x": x}])
    assert len(calls) == 1
    calls.clear()
    quant_file(path, tmp_path / "quant.onnx")
    assert len(calls) == 1
    sha = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "shrunk.onnx", tmp_path / "quant.onnx")}
    assert len(set(sha.values())) == 1  # nothing to change: both wrote the same model
    ran = ort.InferenceSession(str(tmp_path / "quant.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert all(np.array_equal(a, b) for a, b in zip(ran, want))


def test_a_session_of_a_model_with_nothing_to_map_is_the_file_itself(tmp_path, monkeypatch):
    from onnxsurgery.running.sessions import session

    path = _forest(tmp_path / "forest.onnx")
    calls = _full_reads(monkeypatch)
    x = np.ones((2, 64), np.float32)
    got = session(path, map_weights=True).run(None, {"x": x})
    assert calls == []
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_embed_of_a_model_npy_moved_nothing_from_copies_it(tmp_path, monkeypatch):
    """What the graph's export wrote again, byte for byte, with nothing parsed."""
    from onnxsurgery import embed_file, npy_file

    path = _forest(tmp_path / "forest.onnx")
    report = npy_file(path, tmp_path / "npy.onnx", names=["no such node"])
    assert not report.passes[-1].changed
    calls = _full_reads(monkeypatch)
    embedded = embed_file(tmp_path / "npy.onnx", tmp_path / "embedded.onnx")
    assert calls == []
    assert (tmp_path / "embedded.onnx").read_bytes() == (tmp_path / "npy.onnx").read_bytes()
    assert embedded.bytes_after == (tmp_path / "npy.onnx").stat().st_size and embedded.notes
