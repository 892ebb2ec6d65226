"""An embedding table whose gathered rows a recurrent layer (GRU, LSTM, RNN) reads as its input is
stored as float16 by the int8 default (choices/recurrent_tables.py): g2p_en_encoder's 29x256 table
before its GRU carried the whole of its gap to onnx-shrink-ray (issue 55, ahead16). A table read by
anything else stays int8 rows gathered, and so does one asked for explicitly (--dtype int4)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery

import builders

VOCAB, WIDTH, HIDDEN, STEPS = 64, 64, 128, 7  # the table within the share: 4096 of 77,824 elements


def save(tmp_path, reader: str) -> str:
    """ids [STEPS, 1] -> Gather(table) -> a GRU (through a Transpose-free layout: [seq, batch,
    input]) or a MatMul."""
    rng = np.random.default_rng(0)
    table = (rng.standard_normal((VOCAB, WIDTH)) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(table, "table")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"]),
             helper.make_node("Identity", ["rows"], ["x"])]
    if reader == "GRU":
        w = (rng.standard_normal((1, 3 * HIDDEN, WIDTH)) * 0.1).astype(np.float32)
        r = (rng.standard_normal((1, 3 * HIDDEN, HIDDEN)) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")]
        nodes.append(helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=HIDDEN))
        out = builders.vi("y", shape=[STEPS, 1, 1, HIDDEN])
    else:
        m = (rng.standard_normal((WIDTH, HIDDEN)) * 0.2).astype(np.float32)
        inits.append(numpy_helper.from_array(m, "M"))
        nodes.append(helper.make_node("MatMul", ["x", "M"], ["y"]))
        out = builders.vi("y", shape=[STEPS, 1, HIDDEN])
    model = builders.model(nodes, [builders.vi("ids", TensorProto.INT64, [STEPS, 1])], [out], inits, opset=17)
    src = tmp_path / f"{reader}.onnx"
    onnx.save(model, str(src))
    return src


def table(plan):
    return next(w for w in plan.weights if w.name == "table")


def test_a_table_a_gru_reads_is_float16_and_computes_as_before(tmp_path):
    src = save(tmp_path, "GRU")
    w = table(onnxsurgery.quant_plan(src, min_elements=1024))
    assert (w.dtype, w.lowering) == ("float16", "cast"), w
    assert "recurrent layer (GRU)" in w.why
    out = tmp_path / "q.onnx"
    onnxsurgery.quant_file(src, out, min_elements=1024)
    ids = np.random.default_rng(1).integers(0, VOCAB, (STEPS, 1)).astype(np.int64)
    ref, got = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
                for p in (src, out))
    assert np.all(np.isfinite(got)) and np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.02


def test_a_table_a_matmul_reads_stays_int8_rows(tmp_path):
    w = table(onnxsurgery.quant_plan(save(tmp_path, "MatMul"), min_elements=1024))
    assert (w.dtype, w.lowering) == ("int8", "gather"), w


def test_int4_keeps_the_table_in_its_own_bits(tmp_path):
    w = table(onnxsurgery.quant_plan(save(tmp_path, "GRU"), min_elements=1024, dtype="int4"))
    assert w.dtype != "float16", w
