"""Loading and saving: external data, IR version and metadata kept, atomic writes."""

import os

import onnx
import pytest
from conftest import assert_same_outputs, builders

import onnxsurgery
from onnxsurgery.storage import io as osio
from onnxsurgery.storage import staging
from onnxsurgery.errors import InputError, OutputError


def _with_metadata(m):
    m.ir_version = 7
    m.producer_name = "unit-test"
    m.doc_string = "kept"
    onnx.helper.set_model_props(m, {"author": "someone"})
    m.opset_import.append(onnx.helper.make_opsetid("com.example", 3))
    return m


def test_ir_version_opsets_metadata_kept(tmp_path):
    m = _with_metadata(builders.duplicate_initializers())
    out, _ = onnxsurgery.shrink(m)
    assert out.ir_version == 7
    assert out.producer_name == "unit-test" and out.doc_string == "kept"
    assert {p.key: p.value for p in out.metadata_props} == {"author": "someone"}
    assert {(o.domain, o.version) for o in out.opset_import} == {("", 17), ("com.example", 3)}
    path = tmp_path / "o.onnx"
    onnxsurgery.save_model(out, path)
    assert_same_outputs(m, path)


def test_external_data_input_loads_and_shrinks(tmp_path):
    m = builders.duplicate_initializers(n_copies=3, size=32)
    src = tmp_path / "ext.onnx"
    # onnx.save moves the tensors out of the proto it is given, so save a copy.
    onnx.save(onnx.ModelProto.FromString(m.SerializeToString()), str(src),
              save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.weights", size_threshold=0)
    assert (tmp_path / "ext.weights").exists()
    out = tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(src, out)
    assert report.bytes_before == src.stat().st_size + (tmp_path / "ext.weights").stat().st_size
    assert report.pass_report("merge_duplicates").changed == 2
    assert_same_outputs(m, out)


def test_external_data_output_is_one_aligned_file(tmp_path):
    m = builders.duplicate_initializers(n_copies=2, size=32)
    src = tmp_path / "in.onnx"
    onnx.save(m, str(src))
    out = tmp_path / "out.onnx"
    onnxsurgery.shrink_file(src, out, external_data=True)
    saved = onnx.load(str(out), load_external_data=False)
    entries = [{e.key: e.value for e in t.external_data} for t in saved.graph.initializer
               if t.data_location == onnx.TensorProto.EXTERNAL]
    assert entries and {e["location"] for e in entries} == {"out.onnx.data"}
    assert all(int(e["offset"]) % staging.EXTERNAL_DATA_ALIGN == 0 for e in entries)
    assert_same_outputs(m, out)


def test_large_model_goes_external_automatically(tmp_path, monkeypatch):
    # Pretend the protobuf limit is tiny, so the ordinary save path would overflow it.
    monkeypatch.setattr(staging, "PROTOBUF_LIMIT", 2000)  # stage_model's limit
    monkeypatch.setattr(osio, "EXTERNAL_DATA_MARGIN", 0)
    m = builders.duplicate_initializers(n_copies=2, size=32)
    out, _ = onnxsurgery.shrink(m)
    written = onnxsurgery.save_model(out, tmp_path / "big.onnx")
    assert [p.name for p in written] == ["big.onnx.data", "big.onnx"]
    assert_same_outputs(m, tmp_path / "big.onnx")


def test_output_equal_to_input_needs_in_place(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(builders.duplicate_initializers(), str(src))
    before = src.read_bytes()
    with pytest.raises(OutputError, match="in_place=True"):  # the API's word; the CLI says --in-place
        onnxsurgery.shrink_file(src, src)
    assert src.read_bytes() == before
    onnxsurgery.shrink_file(src, src, in_place=True)
    assert len(src.read_bytes()) < len(before)
    assert_same_outputs(builders.duplicate_initializers(), src)


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    src = tmp_path / "m.onnx"
    onnx.save(builders.duplicate_initializers(), str(src))
    out = tmp_path / "out.onnx"

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OutputError, match="No space left"):
        onnxsurgery.shrink_file(src, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_staged_model_is_in_place_only_after_commit(tmp_path):
    m = builders.duplicate_initializers()
    target = tmp_path / "out.onnx"
    with staging.stage_model(m, target, external_data=True) as staged:
        assert staged.path.is_file() and not target.exists()
        assert_same_outputs(m, staged.path)  # complete and loadable before it is in place
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # not committed: nothing left
    with staging.stage_model(m, target, external_data=True) as staged:
        written = staged.commit()
    assert [p.name for p in written] == ["out.onnx.data", "out.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx", "out.onnx.data"]
    assert_same_outputs(m, target)


@pytest.mark.parametrize("content,message", [
    (None, "input not found"),
    (b"this is not a model", "not an ONNX model"),
    (b"", "not an ONNX model"),
])
def test_bad_inputs_raise_clear_errors(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        onnxsurgery.load_model(path)


def test_missing_external_data_is_a_clear_error(tmp_path):
    m = builders.duplicate_initializers(size=32)
    src = tmp_path / "ext.onnx"
    onnx.save(m, str(src), save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(InputError, match="w.bin"):
        onnxsurgery.load_model(src)


def test_ir3_model_keeps_initializers_as_inputs(tmp_path):
    m = builders.duplicate_initializers()
    m.ir_version = 3
    m.opset_import[0].version = 9
    for t in m.graph.initializer:
        m.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    out, report = onnxsurgery.shrink(m)
    assert out.ir_version == 3
    assert {i.name for i in out.graph.input} == {"x", "W0"}
    assert_same_outputs(m, out)


def test_external_data_without_length_entries(tmp_path):
    """ONNX makes `length` optional (the rest of the file); such inputs shrink and save."""
    m = builders.duplicate_initializers(n_copies=2, size=32)
    src = tmp_path / "ext.onnx"
    onnx.save(onnx.ModelProto.FromString(m.SerializeToString()), str(src), save_as_external_data=True,
              all_tensors_to_one_file=False, size_threshold=0)
    stub = onnx.load(str(src), load_external_data=False)
    for t in stub.graph.initializer:
        kept = [(e.key, e.value) for e in t.external_data if e.key != "length"]
        del t.external_data[:]
        for k, v in kept:
            entry = t.external_data.add()
            entry.key, entry.value = k, v
    onnx.save(stub, str(src))
    out = tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(src, out)
    assert report.pass_report("merge_duplicates").changed == 1
    assert_same_outputs(m, out)
