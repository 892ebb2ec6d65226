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


def test_int4_keeps_the_table_in_its_own_bits(tmp_path, int4_forms_alone):
    w = table(onnxsurgery.quant_plan(save(tmp_path, "GRU"), min_elements=1024, dtype="int4"))
    assert w.dtype != "float16", w


def save_cell(tmp_path, with_state: bool) -> str:
    """ids [1] -> Gather(table) -> Gemm(W, transB) cut into three gates, as PyTorch exports a GRU
    cell run one step at a time (romanizer_decoder): r, z = sigmoid(x W_rz + h U_rz), n = tanh(x W_n
    + r * h U_n), h' = (1 - z) n + z h = n - z (n - h). Without the state, the same gates of x alone multiplied (a
    gated activation, no recurrence)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((VOCAB, WIDTH)) * 0.5).astype(np.float32), "table"),
             numpy_helper.from_array((rng.standard_normal((3 * HIDDEN, WIDTH)) * 0.1).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((3 * HIDDEN, HIDDEN)) * 0.1).astype(np.float32), "U")]
    for k in range(4):
        inits.append(numpy_helper.from_array(np.array([k * HIDDEN], np.int64), f"at{k}"))
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis"))
    cut = [helper.make_node("Slice", [src, f"at{k}", f"at{k + 1}", "axis"], [f"{src}{k}"])
           for src in ("gx", "gh") for k in range(3)]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["x"]),
             helper.make_node("Gemm", ["x", "W"], ["gx"], transB=1),
             helper.make_node("Gemm", ["h", "U"], ["gh"], transB=1), *cut]
    if with_state:
        nodes += [helper.make_node("Add", ["gx0", "gh0"], ["r0"]), helper.make_node("Sigmoid", ["r0"], ["r"]),
                  helper.make_node("Add", ["gx1", "gh1"], ["z0"]), helper.make_node("Sigmoid", ["z0"], ["z"]),
                  helper.make_node("Mul", ["r", "gh2"], ["rn"]), helper.make_node("Add", ["gx2", "rn"], ["n0"]),
                  helper.make_node("Tanh", ["n0"], ["n"]), helper.make_node("Sub", ["n", "h"], ["d"]),
                  helper.make_node("Mul", ["z", "d"], ["zd"]),
                  helper.make_node("Sub", ["n", "zd"], ["y"])]
    else:
        nodes += [helper.make_node("Sigmoid", ["gx0"], ["r"]), helper.make_node("Tanh", ["gx2"], ["n"]),
                  helper.make_node("Mul", ["r", "n"], ["rn"]), helper.make_node("Add", ["rn", "gh1"], ["y"])]
    ins = [builders.vi("ids", TensorProto.INT64, [1]), builders.vi("h", shape=[1, HIDDEN])]
    model = builders.model(nodes, ins, [builders.vi("y", shape=[1, HIDDEN])], inits, opset=17)
    src = tmp_path / f"cell{int(with_state)}.onnx"
    onnx.save(model, str(src))
    return src


def test_a_table_an_unrolled_gru_cell_reads_is_float16(tmp_path):
    src = save_cell(tmp_path, with_state=True)
    w = table(onnxsurgery.quant_plan(src, min_elements=1024))
    assert (w.dtype, w.lowering) == ("float16", "cast"), w
    assert "unrolled" in w.why
    out = tmp_path / "q.onnx"
    onnxsurgery.quant_file(src, out, min_elements=1024)
    feeds = {"ids": np.array([5], np.int64), "h": np.random.default_rng(1).standard_normal((1, HIDDEN), np.float32)}
    ref, got = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
                for p in (src, out))
    assert np.all(np.isfinite(got)) and np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.02


def test_a_table_a_gated_activation_reads_stays_int8_rows(tmp_path):
    # sigmoid and tanh of one projection's gates, no state's projection added to them: no recurrence
    w = table(onnxsurgery.quant_plan(save_cell(tmp_path, with_state=False), min_elements=1024))
    assert (w.dtype, w.lowering) == ("int8", "gather"), w
