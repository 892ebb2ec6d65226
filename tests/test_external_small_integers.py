"""A small integer constant stored in the model's data file (zoo12: magika's one-hot table, int32
[1, 1, 257] = 1028 bytes, read by an Equal, in the zoo's `external` variant): `quant --dtype int4`
exits 3, "internal error: ValidationError: Data of TensorProto (tensor name: ...) should be stored
in OUT.onnx.data, but it is not regular file". running/readers.py's `_proto_graph.constant` reads
an integer constant under 4096 bytes with `onnx.numpy_helper.to_array(tensor)` to compare the
readers' definitions (asked where the opset upgrade to 21 changed the kinds); for an external
tensor that resolves its `location` against the working directory, not the model's folder. The
data-free int8 `quant` of the same file, and every command on it as shipped, exit 0. Now read
from the model's folder."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.cli import main


def _one_hot_model(path) -> None:
    """bytes == arange(257) -> Cast -> MatMul, as magika's tf2onnx export one-hots its bytes; the
    table (1028 bytes) and the weight stored in PATH.data, as `onnx.save(size_threshold=1024)`."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((257, 64)).astype(np.float32), "w"),
             numpy_helper.from_array(np.arange(257, dtype=np.int32).reshape(1, 1, 257), "table"),
             numpy_helper.from_array(np.array([2], np.int64), "axes")]
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]), helper.make_node("Equal", ["u", "table"], ["hot"]),
             helper.make_node("Cast", ["hot"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["f", "w"], ["y"])]
    g = helper.make_graph(nodes, "one_hot", [helper.make_tensor_value_info("x", TensorProto.INT32, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, 64])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=f"{path.name}.data", size_threshold=1024)


def test_int4_of_a_model_with_a_small_integer_table_in_its_data_file(tmp_path, monkeypatch):
    src = tmp_path / "model" / "magika.onnx"
    src.parent.mkdir()
    _one_hot_model(src)
    ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])  # onnxruntime takes it as it is
    monkeypatch.chdir(tmp_path)  # neither the model's folder nor the output's
    out = tmp_path / "out" / "q4.onnx"
    out.parent.mkdir()
    r = CliRunner().invoke(main, ["quant", "--dtype", "int4", str(src), str(out)])
    assert r.exit_code == 0, r.output
    x = np.random.default_rng(1).integers(0, 257, (2, 8)).astype(np.int32)
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isfinite(y).all()


def test_int8_of_the_same_model_is_written(tmp_path, monkeypatch):
    src = tmp_path / "model" / "magika.onnx"
    src.parent.mkdir()
    _one_hot_model(src)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q8.onnx")])
    assert r.exit_code == 0, r.output
