"""open_model checks a file's structure once per file identity (storage/io.py, _PROTO_CHECKED): the same
file opened again skips the walks, a changed or another file is checked again."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import helper, numpy_helper

import builders
from onnxsurgery.errors import InputError
from onnxsurgery.storage import io


def _model(name: str = "W"):
    return builders.model([helper.make_node("MatMul", ["x", name], ["y"])], [builders.vi("x", shape=[1, 4])],
                          [builders.vi("y", shape=[1, 4])], [numpy_helper.from_array(builders.rand((4, 4), 1), name)])


def test_the_same_file_is_walked_once_and_a_changed_one_again(tmp_path, monkeypatch):
    walks = []
    real = io._check_names_are_text
    monkeypatch.setattr(io, "_check_names_are_text", lambda model, path: (walks.append(path), real(model, path)))
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    io.open_model(path)[1].close()
    io.open_model(path)[1].close()
    assert len(walks) == 1
    io.open_model(path, structure=True)[1].close()  # read otherwise: checked on its own
    assert len(walks) == 2
    # the same size, other bytes, a later time: a name that is not UTF-8 is found again
    data = _model().SerializeToString()
    bad = data.replace(b"W", b"\xff")
    assert len(bad) == len(data) and bad != data
    path.write_bytes(bad)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    with pytest.raises(InputError, match="UTF-8"):
        io.open_model(path)
    assert len(walks) == 3


def test_a_data_files_place_is_checked_every_time(tmp_path, monkeypatch):
    walks, places = [], []
    real, real_places = io._check_names_are_text, io.check_external_locations
    monkeypatch.setattr(io, "_check_names_are_text", lambda model, path: (walks.append(path), real(model, path)))
    monkeypatch.setattr(io, "check_external_locations", lambda *a: (places.append(a[1]), real_places(*a)))
    model = _model()
    tensor = model.graph.initializer[0]
    np.asarray(numpy_helper.to_array(tensor)).tofile(tmp_path / "w.bin")
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = tensor.EXTERNAL
    tensor.external_data.add(key="location", value="w.bin")
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    io.open_model(path)[1].close()
    io.open_model(path)[1].close()
    assert len(walks) == 1  # the proto's own checks follow from its bytes
    assert len(places) == 2  # its data file's place is checked again (symlinks: paths.confined)
