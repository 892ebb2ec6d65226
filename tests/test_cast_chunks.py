"""An 8-bit weight's float copy in a twinned session, made and multiplied a chunk of columns at a
time (running/joined.py, cast_chunks): the same outputs, bit for bit, as a run of the file."""

from __future__ import annotations

import onnx

import onnxsurgery
from onnxsurgery.running import joined
from onnxsurgery.running.twinned import twin_graph
from test_decoder_inputs import _decoder
from test_twinned_runs import _same_as_runs_of_their_own


def test_column_chunks_cover_the_columns_in_strips_mlas_sums_alike():
    assert joined.column_chunks(2048, 2048, 16 * 2**20) is None  # 16 MiB: whole
    chunks = joined.column_chunks(2048, 32000, 16 * 2**20)  # dec-l4's lm_head
    assert chunks[0] == (0, 2048) and chunks[-1] == (28672, 32000)  # the short last one joined
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:])) and all(e - s >= 2048 for s, e in chunks)
    assert joined.column_chunks(2048, 5632, 16 * 2**20) == [(0, 2048), (2048, 5632)]
    assert joined.column_chunks(5632, 2048, 16 * 2**20) is None  # one chunk of 2048 columns: whole
    assert joined.column_chunks(128, 10**6, 1024) is None  # K of 128: MLAS's K blocks follow N there


def test_an_8bit_weights_copy_is_made_in_chunks_and_computes_the_same(tmp_path, monkeypatch):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128, verify=False)
    model = onnx.load(str(tmp_path / "q.onnx"))
    casts = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast"}
    read = [n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in casts]
    assert read  # the default's lean form: MatMul over Cast(int8 weight)
    for name, value in (("CHUNK_BYTES", 256), ("MIN_COLUMNS", 16), ("MIN_ROWS", 1)):  # a small model's
        monkeypatch.setattr(joined, name, value)
    twinned = twin_graph(onnx.load(str(tmp_path / "q.onnx")))
    slices = [n for n in twinned.graph.node if n.op_type == "Slice" and n.input[0] in casts.values()]
    dims = {t.name: list(t.dims) for t in model.graph.initializer}
    cut = {casts[name] for name in read if joined.column_chunks(*dims[casts[name]])}
    assert cut and {n.input[0] for n in slices} == cut
    read = [name for name in read if casts[name] in cut]
    assert not any(set(n.input) & set(read) for n in twinned.graph.node)  # no whole copy made
    _same_as_runs_of_their_own(tmp_path / "q.onnx")  # its twinned session chunked too, same outputs
    monkeypatch.setattr(joined, "CHUNK_BYTES", 2**30)
    whole = twin_graph(onnx.load(str(tmp_path / "q.onnx")))
    assert not any(n.op_type == "Slice" and n.input[0] in casts.values() for n in whole.graph.node)
