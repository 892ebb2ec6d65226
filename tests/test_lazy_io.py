"""Lazy reading (payloads left in the file) and the splicing writer, on tensors large enough
to take that path (>= lazy.LAZY_THRESHOLD bytes)."""

import numpy as np
import onnx
from conftest import assert_same_outputs, builders
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.storage import file_backed, lazy
from onnxsurgery.storage.io import open_model


def big_model_with_subgraph_and_constant_nodes():
    """64x64 float weights (16 KB): an initializer, an equal Constant node, an equal tensor in
    an If branch, and a distinct one; all above the lazy threshold."""
    w = builders.rand((64, 64), 11)
    other = builders.rand((64, 64), 12)
    then_g = helper.make_graph(
        [builders.const_node("then_W", w.copy()), helper.make_node("MatMul", ["h", "then_W"], ["t"])],
        "then", [], [builders.vi("t", shape=[2, 64])])
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["h", "else_W"], ["e"])], "else", [], [builders.vi("e", shape=[2, 64])],
        initializer=[numpy_helper.from_array(other, "else_W")])
    nodes = [
        builders.const_node("cW", w.copy()),
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("MatMul", ["a", "cW"], ["h"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    return builders.model(nodes, [builders.vi("c", onnx.TensorProto.BOOL, []), builders.vi("x", shape=[2, 64])],
                          [builders.vi("y", shape=[2, 64])], [numpy_helper.from_array(w, "W")])


def test_lazy_reader_leaves_payloads_in_file_and_restores_them_exactly(tmp_path):
    m = big_model_with_subgraph_and_constant_nodes()
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    stub, files, size = open_model(path)
    assert size == path.stat().st_size
    from onnxsurgery.storage.protos import all_tensor_protos

    tensors = list(all_tensor_protos(stub.graph))
    assert len(tensors) == 4 and all(t.data_location == onnx.TensorProto.EXTERNAL for t in tensors)
    assert stub.ByteSize() < 4000  # the 64 KB of weights are not in memory
    full = onnxsurgery.load_model(path)
    assert full.SerializeToString() == onnx.load(str(path)).SerializeToString()


def test_shrink_through_lazy_path_is_exact(tmp_path):
    m = big_model_with_subgraph_and_constant_nodes()
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    out = tmp_path / "o.onnx"
    report = onnxsurgery.shrink_file(src, out, verify=True)
    assert report.pass_report("merge_duplicates").changed == 2
    assert report.verification["exact"]
    saved = onnx.load(str(out))
    assert sum(1 for t in saved.graph.initializer) == 1  # W; else_W stays in its branch
    assert out.stat().st_size < src.stat().st_size - 2 * 64 * 64 * 4 + 1000
    assert_same_outputs(m, out)
    # with external data: one aligned .data file, same outputs
    ext = tmp_path / "e.onnx"
    onnxsurgery.shrink_file(src, ext, external_data=True)
    assert (tmp_path / "e.onnx.data").stat().st_size >= 2 * 64 * 64 * 4
    assert_same_outputs(m, ext)


def test_sampled_fingerprint_never_merges_tensors_that_differ_between_samples(tmp_path):
    a = np.zeros(40000, np.float32)  # 160 KB: fingerprinted from samples
    b = a.copy()
    b[12345] = 1.0  # between two sampled windows
    nodes = [helper.make_node("Add", ["x", "A"], ["s"]), helper.make_node("Add", ["s", "B"], ["y"])]
    m = builders.model(nodes, [builders.vi("x", shape=[40000])], [builders.vi("y", shape=[40000])],
                       [numpy_helper.from_array(a, "A"), numpy_helper.from_array(b, "B")])
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    from onnxsurgery.passes.merge_constants import fingerprint
    from onnxsurgery.pipeline import open_workspace

    ws = open_workspace(src)
    consts = {t.name: t for t in ws.graph.tensors().values() if isinstance(t, type(ws.graph.tensors()["A"]))}
    assert fingerprint(consts["A"], a.nbytes) == fingerprint(consts["B"], b.nbytes)
    out, report = onnxsurgery.shrink(src)
    assert report.pass_report("merge_duplicates").changed == 0
    assert_same_outputs(m, out)


def test_wire_scanner_rejects_garbage(tmp_path):
    import pytest

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 10)
    with pytest.raises(ValueError):
        lazy.read_model_skipping_weights(bad)


def test_file_backed_values_read_straight_into_arrays_equal_numpy_helpers(tmp_path):
    """Weights read on demand come out as onnx's own reader gives them, for the types read
    straight into an array and for those converted (bfloat16), in the file's shape; writable,
    and writing into them leaves the file as it was."""
    assert _read_on_demand(tmp_path) == 0  # all below file_backed.MAP_FROM_BYTES: read, not mapped


def test_large_payloads_load_mapped_and_stay_private(tmp_path, monkeypatch):
    """Payloads of file_backed.MAP_FROM_BYTES or more load as arrays over a private mapping of their
    file: the same values, dtype and shape as onnx's reader gives, writable, and writing into
    them changes neither the file nor the next load (copy-on-write). Those at an offset that
    is no multiple of their item size (in the .onnx itself, within the protobuf) are read."""
    monkeypatch.setattr(file_backed, "MAP_FROM_BYTES", 1)
    assert _read_on_demand(tmp_path) > 0


def _mapped(array: np.ndarray) -> bool:
    import mmap

    while array is not None and not isinstance(array, mmap.mmap):  # numpy's bases, a memoryview's object
        array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
    return array is not None


def _read_on_demand(tmp_path) -> int:
    """The check of the two tests above; returns how many of the arrays loaded were mapped."""
    from onnxsurgery.graph_utils import collect_constants, read_values
    from onnxsurgery.pipeline import open_workspace

    rng = np.random.default_rng(3)
    arrays = {"f32": rng.standard_normal((40, 30)).astype(np.float32),
              "f16": rng.standard_normal((2, 3, 400)).astype(np.float16),
              "i64": rng.integers(-9, 9, (700,)).astype(np.int64),
              "u8": rng.integers(0, 255, (64, 80)).astype(np.uint8),
              "flags": rng.integers(0, 2, (5000,)).astype(bool)}
    inits = [numpy_helper.from_array(a, name) for name, a in arrays.items()]
    bf16 = helper.make_tensor("bf16", onnx.TensorProto.BFLOAT16, [64, 64],
                              rng.integers(0, 2**16, 64 * 64).astype(np.uint16).tobytes(), raw=True)
    inits.append(bf16)
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"]) for name in [*arrays, "bf16"]]
    outputs = [builders.vi(f"{t.name}_out", t.data_type, list(t.dims)) for t in inits]
    m = builders.model(nodes, [], outputs, inits)
    mapped = 0
    for external in (False, True):
        path = tmp_path / f"m{external}.onnx"
        onnx.save(m, str(path), save_as_external_data=external, size_threshold=0)
        expected = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
        for _ in range(2):  # the second time after writing into the first arrays: the file is unchanged
            ws = open_workspace(path)
            try:
                got = {site.name: read_values(site.tensor) for site in collect_constants(ws.graph)}
            finally:
                ws.close()
            assert set(got) == set(expected)
            for name, array in got.items():
                assert array.dtype == expected[name].dtype and array.shape == expected[name].shape, name
                assert array.tobytes() == expected[name].tobytes(), name
                assert array.flags.writeable
                mapped += _mapped(array)
                array.fill(1)
    return mapped


def test_arrays_held_by_the_export_are_written_as_gs_would_write_them(tmp_path):
    """In-memory payloads (a pass's new int8, float16, int64 and bool arrays) are exported as
    references to where the input's files hold them, then written straight from there: the
    files written, inline or with external data, and the materialized model are those of
    gs's own export; small and non-contiguous arrays too."""
    from onnxsurgery.graph_utils import collect_constants, set_values
    from onnxsurgery.storage.staging import save_model
    from onnxsurgery.pipeline import finish, open_workspace

    rng = np.random.default_rng(5)
    new = {"W": rng.integers(-127, 127, (64, 64)).astype(np.int8),
           "else_W": rng.standard_normal((64, 64)).astype(np.float16).T,  # in a branch, not C-contiguous
           "ids": rng.integers(0, 9, (3000,)).astype(np.int64), "flags": np.ones((2, 3), bool)}  # small: inline
    m = big_model_with_subgraph_and_constant_nodes()
    for name in ("ids", "flags"):
        m.graph.initializer.append(numpy_helper.from_array(np.zeros(new[name].shape, new[name].dtype), name))
        m.graph.node.append(helper.make_node("Identity", [name], [f"{name}_out"]))
        m.graph.output.append(builders.vi(f"{name}_out", m.graph.initializer[-1].data_type, list(new[name].shape)))
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    ws = open_workspace(src)
    try:
        for site in collect_constants(ws.graph):
            if site.node is None:
                set_values(site.tensor, new[site.name])
        ours = ws.finish()
        held = {t.name for t in onnxsurgery.storage.protos.all_tensor_protos(ours.graph)
                if t.data_location == onnx.TensorProto.EXTERNAL and lazy.external_ref(t)[0].startswith("\0")}
        assert held == {"W", "else_W", "ids"}
        gs_own = finish(ws.graph, ws.template, overridable=ws.overridable)  # no store: payloads copied in
        for external in (False, True):
            a, b = tmp_path / f"ours{external}.onnx", tmp_path / f"gs{external}.onnx"
            save_model(ours, a, external_data=external, files=ws.files)
            save_model(gs_own, b, external_data=external, files=ws.files)
            assert onnx.load(str(a)).SerializeToString() == onnx.load(str(b)).SerializeToString()
        assert ws.materialized(ws.finish()).SerializeToString() == ws.materialized(gs_own).SerializeToString()
    finally:
        ws.close()


def test_the_scanner_steps_over_attributes_of_plain_numbers(tmp_path, monkeypatch):
    """A tree ensemble's attributes hold millions of numbers, one wire field each (onnx.proto is
    proto2): the scanner skips an attribute whose type holds no tensor or graph rather than
    walking its fields, and still finds the tensors of the others."""
    from onnxsurgery.storage import wire

    m = big_model_with_subgraph_and_constant_nodes()
    floats = np.arange(20000, dtype=np.float32).tolist()
    m.graph.node.append(helper.make_node("Constant", [], ["numbers"], value_floats=floats))
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    walked = []
    real = wire.fields

    def counted(*args):
        for found in real(*args):
            walked.append(found)
            yield found

    monkeypatch.setattr(wire, "fields", counted)
    stub = lazy.read_model_skipping_weights(path)
    assert len(walked) < 200  # the messages' fields, not the 20000 numbers
    from onnxsurgery.storage.protos import all_tensor_protos

    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in all_tensor_protos(stub.graph))
    assert list(stub.graph.node[-1].attribute[0].floats) == floats
    assert onnxsurgery.load_model(path).SerializeToString() == onnx.load(str(path)).SerializeToString()
