"""A comparison's sessions run a ConvInteger as a float Conv only where that computes the same
int32 bit for bit (running/conv_integer.py): every partial sum of a filter's output is an
integer float32 holds (255 * sum |w - w_zero| <= 2**24). The file itself is not changed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.running import conv_integer, runs


def _model(path, weight, w_zero, pads=(1, 1)):
    """x float [1, C, L] -> DynamicQuantizeLinear -> ConvInteger(weight) -> Cast -> Mul: the
    pattern quantize_dynamic writes."""
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(w_zero, "w_zero"),
             numpy_helper.from_array(np.array(0.01, np.float32), "scale")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "w_zero"], ["acc"], pads=list(pads)),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "scale"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, weight.shape[1], "l"])
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _run(model, x):
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_a_float_conv_computes_conv_integers_int32_exactly(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.integers(-128, 128, (8, 16, 3)).astype(np.int8)  # 255 * 48 * 255 < 2**24
    path = _model(tmp_path / "m.onnx", weight, np.array(3, np.int8))
    floated = conv_integer.float_convs(path)
    assert floated is not None and not any(n.op_type == "ConvInteger" for n in floated.graph.node)
    for seed in range(3):  # the padding takes x's zero point in both
        x = np.random.default_rng(seed).standard_normal((1, 16, 37)).astype(np.float32) * (seed + 1)
        assert _run(path, x).tobytes() == _run(floated, x).tobytes()


def test_filters_past_the_bound_stay_integer(tmp_path):
    weight = np.full((2, 300, 1), 127, np.int8)  # 255 * 300 * 255 > 2**24: a float sum may round
    assert conv_integer.float_convs(_model(tmp_path / "m.onnx", weight, np.array(-128, np.int8))) is None
    weight = np.ones((2, 4, 3), np.int8)
    per_channel = _model(tmp_path / "pc.onnx", weight, np.zeros(2, np.int8))  # onnxruntime refuses it
    assert conv_integer.float_convs(per_channel) is None
    assert conv_integer.float_convs(onnx.load(str(per_channel))) is None  # a proto: nothing to map


def test_verifications_sessions_load_the_float_copy(tmp_path, monkeypatch):
    weight = np.random.default_rng(1).integers(-128, 128, (4, 8, 3)).astype(np.int8)
    path = _model(tmp_path / "m.onnx", weight, np.array(0, np.int8))
    loaded = []
    real = runs.session
    monkeypatch.setattr(runs, "session", lambda model, **o: loaded.append(model) or real(model, **o))
    sess = runs.open_session(path)
    assert isinstance(loaded[0], onnx.ModelProto)
    x = np.random.default_rng(2).standard_normal((1, 8, 20)).astype(np.float32)
    assert runs.run(sess, ["y"], {"x": x})[0].tobytes() == _run(path, x).tobytes()
    runs.open_session(path, extra_outputs=("acc",))  # the file's own values asked: the file itself
    assert loaded[-1] == path


def test_a_copy_that_does_not_load_leaves_the_file_to_decide(tmp_path, monkeypatch):
    weight = np.ones((2, 4, 3), np.int8)
    path = _model(tmp_path / "m.onnx", weight, np.array(0, np.int8))
    broken = onnx.load(str(path))
    broken.graph.node[1].op_type = "NoSuchOp"
    monkeypatch.setattr(runs, "as_run", lambda model, options: broken)
    x = np.ones((1, 4, 6), np.float32)
    assert runs.run(runs.open_session(path), ["y"], {"x": x})[0].tobytes() == _run(path, x).tobytes()


def test_an_npy_models_arrays_stay_its_own(tmp_path):
    """`compare` against an `npy` folder: its session takes the folder's arrays (npy.NpyModel), so
    the file is not read as a whole model here."""
    from onnxsurgery.storage.npy import NpyModel

    weight = np.ones((2, 4, 3), np.int8)
    path = _model(tmp_path / "m.onnx", weight, np.array(0, np.int8))
    assert conv_integer.as_run(NpyModel(path), {}) is not None
    assert isinstance(conv_integer.as_run(NpyModel(path), {}), NpyModel)
    assert isinstance(conv_integer.as_run(path, {}), onnx.ModelProto)
