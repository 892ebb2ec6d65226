"""shrink --narrow and --transposed."""

import numpy as np
import onnx
from conftest import assert_same_outputs, builders

import onnxsurgery


def _init(model, name):
    return next(t for t in model.graph.initializer if t.name == name)


def test_narrow_only_where_every_consumer_accepts(tmp_path):
    m = builders.narrowing_cases()
    out, report = onnxsurgery.shrink(m, narrow=True)
    p = report.pass_report("narrow")
    narrowed = {d["name"] for d in p.details["narrowed"]}
    assert narrowed == {"idx", "dbl"}
    assert _init(out, "idx").data_type == onnx.TensorProto.INT32
    assert _init(out, "dbl").data_type == onnx.TensorProto.FLOAT
    # Refused: a shape input, an operand tied to another int64, values that overflow int32.
    reasons = {s.name: s.reason for s in p.skipped}
    assert "must be tensor(int64)" in reasons["shape"]
    assert "shares its type" in reasons["offset"]
    assert "round trip" in reasons["big"]
    for name in ("shape", "offset", "big"):
        assert _init(out, name).data_type == onnx.TensorProto.INT64
    path = tmp_path / "narrow.onnx"
    onnxsurgery.save_model(out, path)
    assert_same_outputs(m, path)


def test_narrow_refuses_slice_and_reshape_inputs(tmp_path):
    nodes = [
        onnx.helper.make_node("Slice", ["x", "starts", "ends"], ["s"]),
        onnx.helper.make_node("Reshape", ["s", "shape"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(np.array([1], np.int64), "starts"),
             onnx.numpy_helper.from_array(np.array([5], np.int64), "ends"),
             onnx.numpy_helper.from_array(np.array([2, 2], np.int64), "shape")]
    m = builders.model(nodes, [builders.vi("x", shape=[8])], [builders.vi("y", shape=[2, 2])], inits)
    out, report = onnxsurgery.shrink(m, narrow=True)
    assert report.pass_report("narrow").changed == 0
    assert all(t.data_type == onnx.TensorProto.INT64 for t in out.graph.initializer)
    assert_same_outputs(m, out)


def test_transposed_copy_becomes_transpose_node(tmp_path):
    m = builders.transposed_pair(vocab=40, hidden=8)
    out, report = onnxsurgery.shrink(m, transposed=True)
    p = report.pass_report("merge_transposed")
    assert p.changed == 1 and p.bytes_saved == 40 * 8 * 4
    assert "Transpose" in p.details["cost"]
    assert len(out.graph.initializer) == 1 and out.graph.initializer[0].name in {"E", "E_T"}
    assert [n.op_type for n in out.graph.node].count("Transpose") == 1
    path = tmp_path / "t.onnx"
    onnxsurgery.save_model(out, path)
    assert_same_outputs(m, path)


def test_transposed_is_opt_in():
    m = builders.transposed_pair()
    out, report = onnxsurgery.shrink(m)
    assert report.pass_report("merge_transposed") is None
    assert len(out.graph.initializer) == 2


def _unnamed(values):
    tensor = onnx.numpy_helper.from_array(values)
    tensor.ClearField("name")  # as exporters write a Constant node's value: no name at all
    return tensor


def test_narrowing_constant_nodes_writes_no_more_than_it_saves(tmp_path):
    # Re-exported, each Constant node's value gained an empty name (2 bytes): a file whose only change
    # was narrowing grew (quire_tagger under quant --target tensorrt: +296 B for 60 B "saved")
    const = [onnx.helper.make_node("Constant", [], [f"c{i}"], value=_unnamed(np.full([2], i, np.float32)))
             for i in range(20)]
    adds = [onnx.helper.make_node("Add", ["x" if i == 0 else f"a{i - 1}", f"c{i}"], [f"a{i}"]) for i in range(20)]
    index = onnx.helper.make_node("Constant", [], ["idx"], value=_unnamed(np.array([1, 0], np.int64)))
    gather = onnx.helper.make_node("Gather", ["a19", "idx"], ["y"])
    m = builders.model([*const, *adds, index, gather], [builders.vi("x", shape=[2])], [builders.vi("y", shape=[2])])
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(m, str(src))
    report = onnxsurgery.quant_file(src, out, target="tensorrt")
    saved = report.pass_report("narrow").bytes_saved
    assert saved == 8  # idx: int64 -> int32
    assert out.stat().st_size == src.stat().st_size - saved
    assert_same_outputs(m, out)
