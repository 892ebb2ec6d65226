"""The output's data file made out of the spill file (storage/adopt.py): the same bytes as the
copy from it, whatever the order of the spilled payloads in the layout, and where the file
system refuses to move blocks (tmpfs), the copy as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.storage.adopt import adopt_spill
from onnxsurgery.storage.lazy import SPILL_LOCATION, ExternalFiles
from onnxsurgery.storage.writer import DataFileLayout, FileRef, write_data_file

# bytes: weights kept in place (256 KB or more, adopt.KEEP_FROM_BYTES) and scales copied aside; odd
# lengths leave padding behind them
SIZES = [400_000, 5_000, 270_336, 700_001, 4_096, 300_000]


def folders(tmp_path):
    yield tmp_path
    shm = Path("/dev/shm")
    if shm.is_dir():  # tmpfs: O_TMPFILE, but no INSERT_RANGE / COLLAPSE_RANGE
        yield shm


def spilled(folder: Path) -> tuple[ExternalFiles, list[tuple[int, int]]]:
    """ExternalFiles over `folder` (an input data file `in.data` in it) whose spill holds one
    payload per SIZES; returns it and each payload's (offset, length) in the spill."""
    rng = np.random.default_rng(0)
    (folder / "in.data").write_bytes(rng.integers(1, 255, 50_000, dtype=np.uint8).tobytes())
    files = ExternalFiles(folder, frozenset({"in.data"}))
    files.spill_into(folder)
    x = gs.Variable("x", np.uint8, (1,))
    consts = [gs.Constant(f"c{i}", rng.integers(1, 255, n, dtype=np.uint8)) for i, n in enumerate(SIZES)]
    nodes = [gs.Node("Add", inputs=[x, c], outputs=[gs.Variable(f"y{i}", np.uint8)]) for i, c in enumerate(consts)]
    graph = gs.Graph(nodes=nodes, inputs=[x], outputs=[n.outputs[0] for n in nodes])
    files.offload(graph)
    places = [(c._values.offset, c._values.length) for c in consts]
    assert all(c._values.location == SPILL_LOCATION for c in consts)
    return files, places


def layout_of(places, order) -> DataFileLayout:
    """A data file's layout: the spilled payloads in `order`, between payloads of the input's
    file and held in memory (as a written model's: weights from the input, scales made here)."""
    layout = DataFileLayout("out.data", 1024, 4096)
    layout.place(FileRef("in.data", 100, 9_999))
    for k, i in enumerate(order):
        layout.place(FileRef(SPILL_LOCATION, *places[i]))
        if k == 2:
            layout.place(bytes(range(1, 200)) * 30)
            layout.place(FileRef("in.data", 20_000, 5_000))
    layout.place(b"\x07" * 3_000)
    return layout


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4, 5], [1, 0, 2, 5, 3, 4], [5, 4, 3, 2, 1, 0], [0, 2, 4, 1, 3, 5]])
def test_the_data_file_made_of_the_spill_has_the_copys_bytes(tmp_path, order):
    for folder in folders(tmp_path):
        work = Path(folder) / f"adopt-{tmp_path.name}"
        work.mkdir()
        try:
            files, places = spilled(work)
            layout = layout_of(places, order)
            with open(work / "copy.data", "wb") as f:  # first: adopting moves the spill's bytes
                write_data_file(f, layout, files)
            (work / "staging").mkdir()
            target = work / "staging" / "out.data"
            rest = adopt_spill(layout, files, target)
            if rest is None:  # refused (tmpfs): nothing was changed, and the copy is as before
                assert not target.exists()
                with open(target, "wb") as f:
                    write_data_file(f, layout, files)
            else:
                assert len(rest.entries) < len(layout.entries)
                with pytest.raises(RuntimeError, match="spill file became"):
                    files.read(SPILL_LOCATION, 0, 10)
                with open(target, "r+b") as f:
                    write_data_file(f, rest, files)
            assert target.read_bytes() == (work / "copy.data").read_bytes()
            files.close()
        finally:
            for p in sorted(work.rglob("*"), reverse=True):
                p.rmdir() if p.is_dir() else p.unlink()
            work.rmdir()


def test_adopting_on_ext4_or_xfs_keeps_most_payloads_in_place(tmp_path):
    """The layout's order but for one swap: the heaviest rising sequence stays in the file."""
    files, places = spilled(tmp_path)
    layout = layout_of(places, [0, 1, 3, 2, 4, 5])
    rest = adopt_spill(layout, files, tmp_path / "out.data")
    if rest is None:
        pytest.skip("this file system moves no blocks (fallocate INSERT_RANGE refused)")
    spilled_left = [p for p, _ in rest.entries if isinstance(p, FileRef) and p.location == SPILL_LOCATION]
    assert spilled_left == []  # the refs are all done; the one out of order was copied aside and back
    assert (tmp_path / "out.data").stat().st_size <= layout.size
    files.close()


def decoder_like(path: Path) -> Path:
    """Three MatMuls whose weights quantize to payloads the data file keeps in place (adopt.KEEP_FROM_BYTES),
    saved with a data file."""
    rng = np.random.default_rng(1)
    shapes = [(512, 768), (768, 512), (512, 512)]
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"w{i}") for i, s in enumerate(shapes)]
    inits.append(numpy_helper.from_array(rng.standard_normal(512).astype(np.float32), "b"))
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"]), helper.make_node("MatMul", ["h0", "w1"], ["h1"]),
             helper.make_node("Add", ["h1", "b"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 512])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    return path


def test_quant_with_a_data_file_writes_the_weights_of_a_one_file_output(tmp_path):
    """End to end (the verified quant, onnxruntime run on both): the data file that took the spill
    over holds the tensors the one-file output holds, and nothing else is left in the folder."""
    src = decoder_like(tmp_path / "m.onnx")
    out_dir, one_dir = tmp_path / "ext", tmp_path / "one"
    out_dir.mkdir(), one_dir.mkdir()
    onnxsurgery.quant_file(src, out_dir / "q.onnx", min_elements=1024)
    onnxsurgery.quant_file(src, one_dir / "q.onnx", min_elements=1024, external_data=False)
    assert sorted(p.name for p in out_dir.iterdir()) == ["q.onnx", "q.onnx.data"]
    assert sorted(p.name for p in one_dir.iterdir()) == ["q.onnx"]
    ext, one = onnx.load(str(out_dir / "q.onnx")), onnx.load(str(one_dir / "q.onnx"))
    tensors = lambda m: {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}  # noqa: E731
    a, b = tensors(ext), tensors(one)
    assert a.keys() == b.keys() and any(v.dtype == np.int8 and v.nbytes >= 256 << 10 for v in a.values())
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name
