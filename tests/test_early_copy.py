"""storage/early_copy.py: shrink begins copying a model's one data file beside the output while
it works out whether anything merges; the copy becomes the output, or is stopped and removed."""

from __future__ import annotations

import onnx
from conftest import assert_same_outputs, builders
from test_external_data import external

import onnxsurgery
from onnxsurgery.storage import early_copy


def _plain(tmp_path):
    """A model with nothing to merge, its weight in one data file."""
    nodes = [onnx.helper.make_node("MatMul", ["x", "W"], ["y"])]
    g = onnx.helper.make_graph(nodes, "g", [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 64])],
                               [onnx.numpy_helper.from_array(builders.rand((64, 64), 3), "W")])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    return m, external(tmp_path / "in.onnx", "weights.bin", m)


def test_nothing_to_merge_the_early_copy_is_the_output(tmp_path, monkeypatch):
    monkeypatch.setattr(early_copy, "CHUNK", 1000)  # many chunks
    m, src = _plain(tmp_path)
    report = onnxsurgery.shrink_file(src, tmp_path / "out.onnx")
    assert report.notes[-1] == "nothing to shrink: the output is a copy of the input and its data file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx", "out.onnx.data", "weights.bin"]
    assert (tmp_path / "out.onnx.data").read_bytes() == (tmp_path / "weights.bin").read_bytes()
    assert_same_outputs(m, tmp_path / "out.onnx")


def test_a_merge_stops_the_early_copy_and_leaves_nothing(tmp_path):
    src = external(tmp_path / "in.onnx", "weights.bin")  # three copies of one weight
    onnxsurgery.shrink_file(src, tmp_path / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx", "out.onnx.data", "weights.bin"]
    assert (tmp_path / "out.onnx.data").stat().st_size < (tmp_path / "weights.bin").stat().st_size
    assert_same_outputs(builders.duplicate_initializers(n_copies=3, size=64), tmp_path / "out.onnx")


def test_cancel_removes_the_staged_copy(tmp_path):
    _, src = _plain(tmp_path)
    copy = early_copy.EarlyCopy.start(src, tmp_path / "out.onnx")
    assert copy is not None and copy.staging.exists()
    copy.cancel()
    assert not copy.staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "weights.bin"]
    assert early_copy.EarlyCopy.start(tmp_path / "missing.onnx", tmp_path / "out.onnx") is None
