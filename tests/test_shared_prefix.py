"""The second candidate's differing part run alone computes what the whole file does (shared_prefix.py)."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from onnxsurgery.api.shared_prefix import Suffix


def _chain(path, last: np.ndarray, layers: int = 6) -> None:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = last if i == layers - 1 else rng.standard_normal((8, 8)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [2, 8])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))


def _run(model, feeds):
    sess = ort.InferenceSession(model if isinstance(model, str) else model.SerializeToString())
    return sess.run(None, feeds)


def test_the_suffix_computes_the_second_file(tmp_path):
    rng = np.random.default_rng(1)
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _chain(a, rng.standard_normal((8, 8)).astype(np.float32))
    _chain(b, rng.standard_normal((8, 8)).astype(np.float32))
    suffix = Suffix.of(a, b)
    assert suffix is not None and suffix.cut == ["r4"] and suffix.outputs == ["r5"]
    assert len(suffix.model.graph.node) == 2  # the last MatMul and its Relu
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    first = _run(suffix.asking(["r4"]), feeds)
    handed = {"r4": first[1]}
    (got,) = _run(suffix.typed(handed), handed)
    np.testing.assert_array_equal(got, _run(str(b), feeds)[0])
    np.testing.assert_array_equal(first[0], _run(str(a), feeds)[0])  # the extra output leaves its outputs


def test_no_cut_where_the_first_weight_differs(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _chain(a, np.ones((8, 8), np.float32), layers=1)
    _chain(b, np.zeros((8, 8), np.float32), layers=1)
    assert Suffix.of(a, b) is None  # the whole graph differs: nothing shared


def test_pieced_outputs_are_confirmed_by_a_whole_run(tmp_path):
    """A kept candidate's outputs pieced from a cut run reach verification only where its file run
    whole on the first sample gives them bit for bit (measured_or_free.Built.confirm)."""
    from onnxsurgery.api.measured_or_free import Built

    path = tmp_path / "b.onnx"
    _chain(path, np.eye(8, dtype=np.float32))
    feed = {"x": np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)}
    (right,) = _run(str(path), feed)
    same = Built("", [[right]], path, pieced=(["r5"], feed))
    same.confirm()
    assert same.outputs is not None
    off = Built("", [[np.nextafter(right, np.float32(np.inf))]], path, pieced=(["r5"], feed))  # one ulp apart
    off.confirm()
    assert off.outputs is None
