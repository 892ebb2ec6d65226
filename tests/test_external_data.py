"""External data in and out: an output's data file is named after it, and a rewrite leaves no
data file behind that nothing refers to any more (but never one another model still reads, nor
one outside the folder)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from conftest import assert_same_outputs, builders

import onnxsurgery


def external(path, location, m=None):
    """Save `m` (default: three copies of one weight) with every tensor in `location`."""
    m = m if m is not None else builders.duplicate_initializers(n_copies=3, size=64)
    m = onnx.ModelProto.FromString(m.SerializeToString())  # onnx.save changes the model it is given
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
              size_threshold=0)
    return path


def files(folder):
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_in_place_removes_the_data_file_the_input_no_longer_needs(tmp_path):
    src = external(tmp_path / "m.onnx", "weights.bin")
    onnxsurgery.shrink_file(src, src, in_place=True)
    assert files(tmp_path) == ["m.onnx", "m.onnx.data"]  # weights in a data file stay in one, named after it
    assert_same_outputs(builders.duplicate_initializers(n_copies=3, size=64), src)


def test_in_place_with_external_data_replaces_the_data_file(tmp_path):
    src = external(tmp_path / "m.onnx", "m.onnx.data")
    onnxsurgery.shrink_file(src, src, in_place=True, external_data=True)
    assert files(tmp_path) == ["m.onnx", "m.onnx.data"]
    onnx.checker.check_model(str(src), full_check=True)
    assert_same_outputs(builders.duplicate_initializers(n_copies=3, size=64), src)
    # and from another name: the new data file is the output's, the old one goes
    src = external(tmp_path / "n.onnx", "old_weights.bin")
    onnxsurgery.shrink_file(src, src, in_place=True, external_data=True)
    assert files(tmp_path) == ["m.onnx", "m.onnx.data", "n.onnx", "n.onnx.data"]


def test_a_data_file_another_model_reads_is_kept(tmp_path):
    src = external(tmp_path / "m.onnx", "shared.bin")
    other = tmp_path / "other.onnx"
    other.write_bytes(src.read_bytes())  # a second model over the same data file
    onnxsurgery.shrink_file(src, src, in_place=True)
    assert files(tmp_path) == ["m.onnx", "m.onnx.data", "other.onnx", "shared.bin"]
    assert_same_outputs(builders.duplicate_initializers(n_copies=3, size=64), other)


def test_rewriting_an_external_data_output_without_the_flag_leaves_no_data_file(tmp_path):
    src = external(tmp_path / "in.onnx", "in.onnx.data")
    out = tmp_path / "out.onnx"
    written = onnxsurgery.shrink_file(src, out, external_data=True)
    assert files(tmp_path) == ["in.onnx", "in.onnx.data", "out.onnx", "out.onnx.data"]  # named after the output
    assert written.bytes_after == (out.stat().st_size + (tmp_path / "out.onnx.data").stat().st_size)
    plain = tmp_path / "plain.onnx"  # a self-contained input, so a self-contained output
    onnx.save(builders.duplicate_initializers(n_copies=3, size=64), str(plain))
    onnxsurgery.shrink_file(plain, out)
    assert files(tmp_path) == ["in.onnx", "in.onnx.data", "out.onnx", "plain.onnx"]
    assert_same_outputs(builders.duplicate_initializers(n_copies=3, size=64), out)


def test_a_copy_over_an_external_data_output_leaves_no_data_file(tmp_path):
    plain = builders.model([onnx.helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[2, 64])],
                           [builders.vi("y", shape=[2, 64])],
                           [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W")])
    src, out = tmp_path / "plain.onnx", tmp_path / "out.onnx"
    onnx.save(plain, str(src))
    external(out, "out.onnx.data")  # an earlier output
    report = onnxsurgery.shrink_file(src, out)
    assert report.notes == ["nothing to shrink: the output is a copy of the input"]
    assert files(tmp_path) == ["out.onnx", "plain.onnx"]


def test_npy_and_embed_in_place_leave_no_data_file(tmp_path):
    src = external(tmp_path / "m.onnx", "weights.bin")
    onnxsurgery.npy_file(src, src, in_place=True, min_bytes=1024)
    assert files(tmp_path) == ["m.npy", "m.npy.json", "m.onnx"]
    onnxsurgery.embed_file(src, src, in_place=True, external_data=True)
    assert files(tmp_path) == ["m.npy", "m.npy.json", "m.onnx", "m.onnx.data"]


@pytest.mark.parametrize("location", ["../victim.bin", "link.bin"])
def test_only_plain_files_in_the_folder_are_removed(tmp_path, location):
    """The old output's locations come from a file that may be untrusted: a location outside the
    folder, or a symlink, is never removed."""
    folder = tmp_path / "models"
    folder.mkdir()
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"keep me")
    if location == "link.bin":
        os.symlink(victim, folder / "link.bin")
    out = folder / "out.onnx"
    m = builders.duplicate_initializers(n_copies=1, size=64)
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    out.write_bytes(m.SerializeToString())  # not loadable, only replaced
    src = folder / "in.onnx"
    onnx.save(builders.duplicate_initializers(), str(src))
    onnxsurgery.shrink_file(src, out)
    assert victim.read_bytes() == b"keep me"
    assert (location != "link.bin") or (folder / "link.bin").is_symlink()


def test_quant_keeps_weights_in_a_data_file_when_the_input_had_one(tmp_path):
    """onnxruntime maps a data file instead of holding a parsed copy of the weights: an input
    that keeps them in one gets an output that does too (onnxruntime-genai's SmolLM2 export,
    default int8: 1.08x -> 0.94x the float model's memory after session creation)."""
    model = builders.quant_cases()
    src = external(tmp_path / "m.onnx", "m.onnx.data", model)
    out = tmp_path / "q.onnx"
    report = onnxsurgery.quant_file(src, out, min_elements=1024,
                                    samples=[{"ids": np.array([3, 77]), "c": np.array(True)}])
    assert files(tmp_path) == ["m.onnx", "m.onnx.data", "q.onnx", "q.onnx.data"]
    assert report.bytes_after == out.stat().st_size + (tmp_path / "q.onnx.data").stat().st_size


def test_nothing_to_shrink_with_a_data_file_copies_both_nodes_in_their_order(tmp_path):
    """A model with a data file and nothing to merge is copied with it (staging.copy_with_data):
    the nodes keep their order, which a re-export would sort (onnxruntime computed isnet_fp16
    with its Casts appended last 2.7e-4 apart once sorted, so `shrink --verify` refused it), and
    the data file is the input's, named after the output. The input's files are left as they are."""
    nodes = [onnx.helper.make_node("MatMul", ["h", "W"], ["y"]),
             onnx.helper.make_node("Relu", ["x"], ["h"])]  # not in topological order
    g = onnx.helper.make_graph(nodes, "g", [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 64])],
                               [onnx.numpy_helper.from_array(builders.rand((64, 64), 3), "W")])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    src = external(tmp_path / "in.onnx", "weights.bin", m)
    before = {p: p.read_bytes() for p in (src, tmp_path / "weights.bin")}
    out = tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(src, out, verify=True)
    assert report.notes == ["nothing to shrink: the output is a copy of the input and its data file"]
    assert files(tmp_path) == ["in.onnx", "out.onnx", "out.onnx.data", "weights.bin"]
    assert (tmp_path / "out.onnx.data").read_bytes() == before[tmp_path / "weights.bin"]
    written = onnx.load(str(out), load_external_data=False)
    assert [n.op_type for n in written.graph.node] == ["MatMul", "Relu"]
    assert {e.value for t in written.graph.initializer for e in t.external_data if e.key == "location"} == \
        {"out.onnx.data"}
    assert {p: p.read_bytes() for p in before} == before
    assert_same_outputs(m, out)
