"""`npy` writes a tree ensemble's long list attributes from the input's parsed protos
(storage/held_lists.py), not from an export's copy of them: the same file, byte for byte, and an
export that holds placeholders instead of the tables."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from test_structure_reads import TREES, _forest

from onnxsurgery import npy_file, run_model
from onnxsurgery.pipeline import open_workspace
from onnxsurgery.storage.held_lists import held
from onnxsurgery.storage.staging import save_model


def test_written_from_the_held_protos_as_the_export_writes_them(tmp_path):
    path = _forest(tmp_path / "forest.onnx", weight=True)
    ws = open_workspace(path)
    plain = ws.finish()
    save_model(plain, tmp_path / "plain.onnx", files=ws.files)
    with held(ws.graph) as lists:
        exported = ws.finish()
    tables = [a for a in exported.graph.node[0].attribute if a.doc_string]
    assert len(tables) == 11 and all(not (a.ints or a.floats or a.strings) for a in tables)
    assert exported.ByteSize() < plain.ByteSize() // 10  # the export holds no table
    # the graph's own protos are back once the block ends: a second export is the first
    assert ws.finish() == plain
    save_model(exported, tmp_path / "held.onnx", files=ws.files, lists=lists)
    assert (tmp_path / "held.onnx").read_bytes() == (tmp_path / "plain.onnx").read_bytes()


def test_npy_of_a_forest_runs_as_the_forest(tmp_path):
    path = _forest(tmp_path / "forest.onnx", weight=True)
    npy_file(path, tmp_path / "npy.onnx")
    written = onnx.load(str(tmp_path / "npy.onnx"))
    assert not any(a.doc_string for n in written.graph.node for a in n.attribute)
    tree = {a.name: a for a in written.graph.node[0].attribute}
    assert len(tree["target_weights"].floats) == TREES
    x = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = run_model(tmp_path / "npy.onnx", {"x": x})
    assert all(np.array_equal(a, got[n]) for a, n in zip(want, ("sum", "total", "y")))
