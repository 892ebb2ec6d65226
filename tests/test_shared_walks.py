"""The walks a command repeats over one input's proto, shared or pruned (issue 58, int4conv18):
open_model's checks of the proto alone run once per file as it stands, and the walk for external
locations goes only into messages whose type can hold a tensor."""

import os

import onnx
import pytest
from conftest import builders
from onnx import helper

from onnxsurgery.errors import InputError
from onnxsurgery.storage import io as osio
from onnxsurgery.storage import paths


def _counting(monkeypatch) -> list:
    seen = []
    real = osio._check_names_are_text
    monkeypatch.setattr(osio, "_check_names_are_text", lambda model, path: (seen.append(path), real(model, path)))
    return seen


def test_a_file_opened_twice_is_checked_once(tmp_path, monkeypatch):
    seen = _counting(monkeypatch)
    src = tmp_path / "m.onnx"
    onnx.save(builders.quant_cases(), str(src))
    first, _, _ = osio.open_model(src)
    second, _, _ = osio.open_model(src)
    assert first == second and len(seen) == 1
    osio.open_model(str(src.resolve()))  # the same file by another spelling of its path
    assert len(seen) == 1


def test_a_file_rewritten_is_checked_again(tmp_path, monkeypatch):
    seen = _counting(monkeypatch)
    src = tmp_path / "m.onnx"
    data = builders.quant_cases().SerializeToString()
    src.write_bytes(data)
    osio.open_model(src)
    at = data.find(b"W_mm")  # the same size, a name no longer UTF-8: a new inode and time
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data[:at] + b"\xff" + data[at + 1:])
    os.replace(bad, src)
    with pytest.raises(InputError, match="is not UTF-8 text"):
        osio.open_model(src)
    assert len(seen) == 2


def test_external_locations_found_past_value_infos_in_every_place():
    tensor = helper.make_tensor("deep", onnx.TensorProto.FLOAT, [1], [0.0])
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.float_data[:]
    tensor.external_data.add(key="location", value="deep.bin")
    body = helper.make_graph([helper.make_node("Constant", [], ["c"], value=tensor)], "body", [],
                             [helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [1])])
    outer = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body)], "g",
        [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
        value_info=[helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(outer)
    assert list(paths.external_locations(model)) == [("deep", "deep.bin"), ("deep", "deep.bin")]
    # the types the walk leaves out hold no tensor by the schema; those it enters can
    assert not paths._holds_tensors(onnx.ValueInfoProto.DESCRIPTOR)
    assert not paths._holds_tensors(onnx.TypeProto.DESCRIPTOR)
    assert all(paths._holds_tensors(t.DESCRIPTOR) for t in (onnx.TensorProto, onnx.AttributeProto,
                                                              onnx.SparseTensorProto, onnx.FunctionProto))
