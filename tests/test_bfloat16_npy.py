"""npy -> run -> embed with bfloat16 (and float8) constants: .npy has no such dtype (numpy reads
it as `|V2`), so the arrays travel as their bit patterns and come back exactly."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import onnx
import pytest
from builders import model, vi
from conftest import run
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.errors import InputError
from onnxsurgery.storage.npy import load_feeds, manifest_path


def cast_model(n: int, dtype=ml_dtypes.bfloat16, opset=17) -> onnx.ModelProto:
    """A weight of `dtype` read twice (so that npy moves it), each time through a Cast to float."""
    w = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
    nodes = [helper.make_node("Cast", ["W"], ["w0"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w0"], ["h"]),
             helper.make_node("Cast", ["W"], ["w1"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["h", "w1"], ["y"])]
    return model(nodes, [vi("x", shape=[n, n])], [vi("y", shape=[n, n])], [numpy_helper.from_array(w, "W")],
                 opset=opset, ir=10 if opset >= 21 else 8)


# 64 x 64 goes inline into the session, 256 x 256 through add_external_initializers (4-bit
# always inline, packed)
CASES = {"bf16 small": (64, ml_dtypes.bfloat16, 17), "bf16 large": (256, ml_dtypes.bfloat16, 17),
         "float8 large": (256, ml_dtypes.float8_e4m3fn, 19), "int4 large": (512, ml_dtypes.int4, 21)}


@pytest.mark.parametrize("case", list(CASES))
def test_npy_run_embed_round_trip_is_bit_exact(tmp_path, case):
    n, dtype, opset = CASES[case]
    m = cast_model(n, dtype, opset)
    src, graph, back = tmp_path / "m.onnx", tmp_path / "graph.onnx", tmp_path / "back.onnx"
    onnx.save(m, str(src))
    report = onnxsurgery.npy_file(src, graph)
    assert report.pass_report("externalize").changed == 1

    manifest = json.loads(manifest_path(graph).read_text())
    entry = manifest["inputs"]["W"]
    width = np.dtype(dtype).itemsize * 8
    assert entry["dtype"] == np.dtype(dtype).name and entry["stored_as"] == f"uint{width} bit patterns"
    assert "ml_dtypes" in manifest["note"]
    stored = np.load(tmp_path / entry["file"])
    assert stored.dtype == np.dtype(f"uint{width}")  # numbers, not opaque |V2 records
    original = numpy_helper.to_array(m.graph.initializer[0])
    assert stored.view(dtype).tobytes() == original.tobytes()  # the manifest's note holds

    feeds = load_feeds(graph)
    assert feeds["W"].dtype == np.dtype(dtype) and feeds["W"].tobytes() == original.tobytes()

    x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    (expected,) = run(m, {"x": x})
    got = onnxsurgery.run_model(graph, {"x": x})["y"]
    assert got.tobytes() == expected.tobytes()

    onnxsurgery.embed_file(graph, back)
    restored = onnx.load(str(back)).graph.initializer
    (w,) = [t for t in restored if t.name == "W"]
    assert w.data_type == m.graph.initializer[0].data_type
    assert w.raw_data == m.graph.initializer[0].raw_data  # the same bytes (4-bit: packed again)
    assert run(onnx.load(str(back)), {"x": x})[0].tobytes() == expected.tobytes()


def test_plain_dtypes_keep_the_manifest_as_it_was(tmp_path):
    m = cast_model(64, np.float16)
    src, graph = tmp_path / "m.onnx", tmp_path / "graph.onnx"
    onnx.save(m, str(src))
    onnxsurgery.npy_file(src, graph)
    manifest = json.loads(manifest_path(graph).read_text())
    assert "note" not in manifest and "stored_as" not in manifest["inputs"]["W"]
    assert manifest["inputs"]["W"]["dtype"] == "float16"


def test_a_bit_pattern_file_of_another_width_is_refused(tmp_path):
    m = cast_model(64)
    src, graph = tmp_path / "m.onnx", tmp_path / "graph.onnx"
    onnx.save(m, str(src))
    onnxsurgery.npy_file(src, graph)
    entry = json.loads(manifest_path(graph).read_text())["inputs"]["W"]
    np.save(tmp_path / entry["file"], np.zeros((64, 64), np.uint8))
    with pytest.raises(InputError, match="stored as uint16 bit patterns"):
        load_feeds(graph)
    data = json.loads(manifest_path(graph).read_text())
    data["inputs"]["W"]["dtype"] = "object"  # a manifest naming a type we do not store as bits
    manifest_path(graph).write_text(json.dumps(data))
    with pytest.raises(InputError, match="not stored as bit patterns"):
        load_feeds(graph)
