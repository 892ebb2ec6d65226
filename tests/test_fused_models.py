"""Models fused by onnxruntime (com.microsoft EmbedLayerNormalization, Attention, FusedMatMul,
SkipLayerNormalization, FusedGemm) and bfloat16 tables read through a Cast: the lean lowering
each weight takes, checked in the saved file's nodes, the plan's records and a real session."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from conftest import run


@pytest.fixture(autouse=True)
def _lean_forms_alone(monkeypatch):
    """These tests are about the lean forms themselves. On their tiny models, which have no
    embedding table to save memory elsewhere, the load-memory rule (quantization/choices/load_memory.py,
    tests/test_load_memory.py) would keep the MatMul weights quantized in memory instead."""
    from onnxsurgery.quantization.choices import load_memory, planner  # noqa: F401 - planner's imports read it first

    monkeypatch.setattr(load_memory, "EXTRA_AT_LOAD", {})


HIDDEN, VOCAB, POSITIONS, SEQ, HEADS = 32, 64, 16, 6, 2
MS = "com.microsoft"


def _fused_model(batch: int = 1) -> onnx.ModelProto:
    """A one-layer BERT as onnxruntime's transformer optimizer writes it: EmbedLayerNormalization
    (word, position and segment tables), Attention (packed QKV weight), FusedMatMul with transB
    and alpha, SkipLayerNormalization, FusedGemm (Tanh: no scale can follow it), MatMul."""
    def init(name, shape, seed, scale=0.2):
        return numpy_helper.from_array(builders.rand(shape, seed) * scale, name)

    nodes = [
        helper.make_node("EmbedLayerNormalization", ["input_ids", "segment_ids", "word", "position", "segment",
                                                     "gamma0", "beta0", "mask"], ["emb", "mask_index"], domain=MS,
                         epsilon=1e-12),
        helper.make_node("Attention", ["emb", "qkv", "qkv_bias", "mask_index"], ["attn"], domain=MS, num_heads=HEADS),
        helper.make_node("FusedMatMul", ["attn", "dense"], ["dense_out"], domain=MS, transB=1, alpha=0.5),
        helper.make_node("SkipLayerNormalization", ["dense_out", "emb", "gamma1", "beta1"], ["ln"], domain=MS,
                         epsilon=1e-12),
        helper.make_node("Reshape", ["ln", "rows"], ["ln_rows"]),
        helper.make_node("FusedGemm", ["ln_rows", "up", "up_bias"], ["up_rows"], domain=MS, activation="Tanh"),
        helper.make_node("Reshape", ["up_rows", "up_shape"], ["up_out"]),
        helper.make_node("MatMul", ["up_out", "down"], ["y"]),
    ]
    inits = [init("word", (VOCAB, HIDDEN), 1), init("position", (POSITIONS, HIDDEN), 2),
             init("segment", (2, HIDDEN), 3),
             numpy_helper.from_array(np.ones(HIDDEN, np.float32), "gamma0"),
             numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "beta0"),
             init("qkv", (HIDDEN, 3 * HIDDEN), 4), init("qkv_bias", (3 * HIDDEN,), 5, 0.1),
             init("dense", (HIDDEN, HIDDEN), 6), numpy_helper.from_array(np.ones(HIDDEN, np.float32), "gamma1"),
             numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "beta1"),
             init("up", (HIDDEN, 2 * HIDDEN), 7), init("up_bias", (2 * HIDDEN,), 8, 0.1),
             init("down", (2 * HIDDEN, HIDDEN), 9),
             numpy_helper.from_array(np.array([-1, HIDDEN], np.int64), "rows"),
             numpy_helper.from_array(np.array([batch, SEQ, 2 * HIDDEN], np.int64), "up_shape")]
    inputs = [builders.vi(n, TensorProto.INT32, [batch, SEQ]) for n in ("input_ids", "segment_ids", "mask")]
    graph = helper.make_graph(nodes, "tiny_fused", inputs, [builders.vi("y", shape=[batch, SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = builders.IR
    return model


def _samples(n=4, batch=1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int32),
             "segment_ids": rng.integers(0, 2, (batch, SEQ)).astype(np.int32),
             "mask": np.ones((batch, SEQ), np.int32)} for _ in range(n)]


def _quant(tmp_path, model, **options):
    tmp_path.mkdir(parents=True, exist_ok=True)
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, samples=_samples(), **{"min_elements": 512, **options})
    return onnx.load(str(out)), out, report


def _worst_rel(model, out) -> float:
    worst = 0.0
    for feeds in _samples():
        (a,), (b,) = run(model, feeds), run(out, feeds)
        worst = max(worst, float(np.linalg.norm(b - a) / np.linalg.norm(a)))
    return worst


def _producer(saved: onnx.ModelProto, tensor: str) -> onnx.NodeProto | None:
    return next((n for n in saved.graph.node if tensor in n.output), None)


def _reader(saved: onnx.ModelProto, op: str) -> onnx.NodeProto:
    return next(n for n in saved.graph.node if n.op_type == op)


def _records(report) -> dict[str, dict]:
    return {w["name"] if isinstance(w, dict) else w.name: w if isinstance(w, dict) else vars(w)
            for w in report.weights}


def test_default_gives_each_contrib_weight_its_lean_lowering(tmp_path):
    model = _fused_model()
    saved, out, report = _quant(tmp_path, model)
    records = _records(report)
    assert {name: records[name]["lowering"] for name in ("qkv", "dense", "up", "down")} == \
        {"qkv": "scaled", "dense": "scaled", "up": "dq", "down": "scaled"}
    assert records["qkv"]["axis"] == 0 and records["dense"]["axis"] == 0  # input rows; transB: output rows
    assert "input row" in records["qkv"]["why"] and "contrib op" in records["up"]["why"]
    inits = {t.name: t for t in saved.graph.initializer}

    # Attention reads Cast(int8) and its data input times the row scales
    attention = _reader(saved, "Attention")
    cast = _producer(saved, attention.input[1])
    assert cast.op_type == "Cast" and inits[cast.input[0]].data_type == TensorProto.INT8
    before = _producer(saved, attention.input[0])
    assert before.op_type == "Mul" and before.input[0] == "emb"
    assert list(inits[before.input[1]].dims) == [HIDDEN]
    # FusedMatMul reads Cast(int8), its output is scaled after it
    fused = _reader(saved, "FusedMatMul")
    assert _producer(saved, fused.input[1]).op_type == "Cast"
    assert [n.op_type for n in saved.graph.node if fused.output[0] in n.input] == ["Mul"]
    # FusedGemm (Tanh after the product): DequantizeLinear per channel, kept at load
    gemm = _reader(saved, "FusedGemm")
    dq = _producer(saved, gemm.input[1])
    assert dq.op_type == "DequantizeLinear" and inits[dq.input[0]].data_type == TensorProto.INT8
    # EmbedLayerNormalization: the word table's int8 rows gathered by the token ids, the op given
    # those rows and their positions; the position table stays float and the plan says why
    embed = _reader(saved, "EmbedLayerNormalization")
    assert records["word"]["lowering"] == "embed_rows" and "word" not in inits
    assert [_producer(saved, embed.input[i]).op_type for i in (0, 2)] == ["Reshape", "Reshape"]
    lookups = [n for n in saved.graph.node if n.op_type == "Gather" and n.input[1] == "input_ids"]
    assert any(inits[n.input[0]].data_type == TensorProto.INT8 and list(inits[n.input[0]].dims) == [VOCAB, HIDDEN]
               for n in lookups if n.input[0] in inits)
    assert embed.input[3:5] == ["position", "segment"] and inits["position"].data_type == TensorProto.FLOAT
    assert records["position"]["dtype"] == "float" and "lookup table of EmbedLayerNormalization" in \
        records["position"]["why"]

    error = _worst_rel(model, out)
    assert error < 0.05
    assert report.verification["rel_l2_error"] == pytest.approx(error, rel=0.5, abs=1e-3)


def _row_bytes(saved: onnx.ModelProto, ids: str, vocab: int) -> int:
    """Bytes a row of the stored integer table that a Gather reads by `ids` (embed_rows: the rows
    gathered first) takes: its length for 8-bit values, half of it for 4-bit ones."""
    inits = {t.name: t for t in saved.graph.initializer}
    tables = [inits[n.input[0]] for n in saved.graph.node
              if n.op_type == "Gather" and n.input[1] == ids and n.input[0] in inits]
    table = next(t for t in tables if t.dims[0] == vocab and t.data_type in (TensorProto.INT8, TensorProto.UINT8))
    return int(np.prod(table.dims[1:]))


def test_int4_keeps_fused_weights_in_the_forms_onnxruntime_runs_fast(tmp_path, int4_forms_alone):
    """--dtype int4 on a fused model: the word table 4-bit rows gathered for the ids (not float),
    Attention's and FusedMatMul's weights the int8 default's lean form (a 4-bit DequantizeLinear
    before them runs at every inference), FusedGemm's int8 DequantizeLinear per channel, the MatMul
    4-bit as MatMulNBits (a model with com.microsoft ops runs in onnxruntime only:
    int4_paths.runs_matmulnbits); the plan says which fell back; the file is smaller than the
    int8 default's."""
    model = _fused_model()
    saved, out, report = _quant(tmp_path / "int4", model, dtype="int4")
    _, int8_out, _ = _quant(tmp_path / "int8", model)
    records = _records(report)
    names = ("word", "qkv", "dense", "up", "down")
    forms = {name: (records[name]["dtype"], records[name]["lowering"]) for name in names}
    assert forms == {"word": ("int4", "embed_rows"), "qkv": ("int8", "scaled"), "dense": ("int8", "scaled"),
                     "up": ("int8", "dq"), "down": ("int4", "matmulnbits")}
    for name in ("qkv", "dense", "up"):
        assert "not 4-bit" in records[name]["why"] and "every inference" in records[name]["why"], name
    assert "rows gathered" in records["word"]["why"]
    assert records["position"]["dtype"] == "float"
    # no DequantizeLinear before a com.microsoft op: Attention reads Cast(int8), EmbedLayerNormalization its rows
    attention = _reader(saved, "Attention")
    assert _producer(saved, attention.input[1]).op_type == "Cast"
    embed = _reader(saved, "EmbedLayerNormalization")
    assert _producer(saved, embed.input[2]).op_type == "Reshape"
    assert "word" not in {t.name for t in saved.graph.initializer}
    assert _row_bytes(saved, "input_ids", VOCAB) == HIDDEN // 2  # two 4-bit values a byte
    assert out.stat().st_size < int8_out.stat().st_size
    error = _worst_rel(model, out)
    assert error < 0.3
    assert report.verification["rel_l2_error"] == pytest.approx(error, rel=0.5, abs=1e-3)


def test_keep_quantized_gathers_the_word_table_and_dequantizes_the_rest(tmp_path):
    """--keep-quantized: contrib weights in DequantizeLinear; the word table's int8 rows gathered
    for the ids (a DequantizeLinear before EmbedLayerNormalization would dequantize all of it at
    every run), integers kept in the file."""
    model = _fused_model()
    saved, out, report = _quant(tmp_path, model, keep_quantized=True)
    records = _records(report)
    for name in ("qkv", "dense", "up", "down"):
        assert records[name]["lowering"] == "dq", name
    for op in ("Attention", "FusedMatMul", "FusedGemm"):
        assert _producer(saved, _reader(saved, op).input[1]).op_type == "DequantizeLinear", op
    assert (records["word"]["dtype"], records["word"]["lowering"]) == ("int8", "embed_rows")
    assert "rows gathered" in records["word"]["why"]
    embed = _reader(saved, "EmbedLayerNormalization")
    assert _producer(saved, embed.input[2]).op_type == "Reshape"
    assert not any(n.op_type == "DequantizeLinear" and embed.input[2] in n.output for n in saved.graph.node)
    assert _row_bytes(saved, "input_ids", VOCAB) == HIDDEN
    error = _worst_rel(model, out)
    assert error < 0.05
    assert report.verification["rel_l2_error"] == pytest.approx(error, rel=0.5, abs=1e-3)


def test_an_explicit_lowering_leaves_the_word_table_float(tmp_path):
    """--lowering dq asks for DequantizeLinear everywhere: before EmbedLayerNormalization that
    would dequantize the whole table at every run, so the table stays float and the plan says so."""
    _, _, report = _quant(tmp_path, _fused_model(), lowering="dq", dtype="int4")
    word = _records(report)["word"]
    assert word["dtype"] == "float" and "lookup table" in word["why"]


def test_include_quantizes_an_embed_table_anyway(tmp_path):
    """--include names the position table, which embed_rows does not take: DequantizeLinear."""
    model = _fused_model()
    saved, out, report = _quant(tmp_path, model, include=("position",), keep_quantized=True)
    records = _records(report)
    assert records["position"]["lowering"] == "dq" and records["qkv"]["dtype"] == "float"
    embed = _reader(saved, "EmbedLayerNormalization")
    assert _producer(saved, embed.input[3]).op_type == "DequantizeLinear"
    assert _worst_rel(model, out) < 0.05


def test_fused_matmul_without_trans_b_scales_its_columns(tmp_path):
    w = builders.rand((64, 48), 1) * 0.1
    nodes = [helper.make_node("FusedMatMul", ["x", "W"], ["y"], domain=MS, alpha=2.0)]
    graph = helper.make_graph(nodes, "g", [builders.vi("x", shape=[2, 5, 64])], [builders.vi("y", shape=[2, 5, 48])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = builders.IR
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, min_elements=512)
    saved = onnx.load(str(out))
    record = _records(report)["W"]
    assert (record["lowering"], record["axis"]) == ("scaled", 1)
    after = [n for n in saved.graph.node if _reader(saved, "FusedMatMul").output[0] in n.input]
    assert [n.op_type for n in after] == ["Mul"]
    scale = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}[after[0].input[1]]
    assert scale.shape == (48,)
    feeds = builders.feeds_for(model)
    (a,), (b,) = run(model, feeds), run(out, feeds)
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.02


def test_bfloat16_table_behind_a_cast_is_scaled_after_its_gather(tmp_path):
    """A bfloat16 checkpoint's table (bf16 -> Cast -> Gather): one scale per column after the
    Gather, int8 stored, the bfloat16 copy and its Cast gone."""
    table = builders.rand((256, 32), 1)
    bf16 = helper.make_tensor("table_bf16", TensorProto.BFLOAT16, table.shape,
                              (table.view(np.uint32) >> 16).astype(np.uint16).tobytes(), raw=True)
    nodes = [helper.make_node("Cast", ["table_bf16"], ["table"], to=TensorProto.FLOAT),
             helper.make_node("Gather", ["table", "ids"], ["y"])]
    graph = helper.make_graph(nodes, "g", [builders.vi("ids", TensorProto.INT64, [1, 7])],
                              [builders.vi("y", shape=[1, 7, 32])], [bf16])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = builders.IR
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    ids = np.array([[0, 5, 17, 99, 128, 200, 255]], np.int64)
    report = onnxsurgery.quant_file(src, out, min_elements=512, samples=[{"ids": ids}])
    saved = onnx.load(str(out))
    assert _records(report)["table_bf16"]["lowering"] == "scaled"
    assert {t.data_type for t in saved.graph.initializer if t.dims == [256, 32]} == {TensorProto.INT8}
    gather = _reader(saved, "Gather")
    assert [n.op_type for n in saved.graph.node if gather.output[0] in n.input] == ["Mul"]
    (a,), (b,) = run(model, {"ids": ids}), run(out, {"ids": ids})
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.02


def test_embed_rows_computes_what_the_dequantized_table_does(tmp_path):
    """Batch 2: the gathered rows and remapped ids give the outputs of the same model with the
    int8 table dequantized in numpy (only the word table quantized)."""
    model = _fused_model(batch=2)
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    samples = _samples(batch=2)
    report = onnxsurgery.quant_file(src, out, samples=samples, min_elements=512, include=("word",))
    assert _records(report)["word"]["lowering"] == "embed_rows"
    saved = onnx.load(str(out))
    inits = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    table = next(v for v in inits.values() if v.dtype == np.int8 and v.shape == (VOCAB, HIDDEN))
    scale = next(v for v in inits.values() if v.size == VOCAB and v.dtype in (np.float16, np.float32))
    dequantized = table.astype(np.float32) * scale.astype(np.float32).reshape(VOCAB, 1)
    _assert_computes_as_table(src, out, dequantized, samples)


def test_four_bit_embed_rows_compute_what_the_dequantized_table_does(tmp_path):
    """4-bit rows (packed two a byte, split in the graph) for batch 2 give the outputs of the
    model with the stored nibbles dequantized in numpy (symmetric: (nibble - 8) * scale)."""
    model = _fused_model(batch=2)
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    samples = _samples(batch=2)
    report = onnxsurgery.quant_file(src, out, samples=samples, min_elements=512, include=("word",),
                                    dtype="int4", symmetric=True)
    assert (_records(report)["word"]["lowering"], _records(report)["word"]["dtype"]) == ("embed_rows", "int4")
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}
    packed = next(v for v in inits.values() if v.dtype == np.uint8 and v.shape == (VOCAB, HIDDEN // 2))
    scale = next(v for v in inits.values() if v.size == VOCAB and v.dtype in (np.float16, np.float32))
    nibbles = np.concatenate([packed & 15, packed >> 4], axis=1).astype(np.float32)
    dequantized = (nibbles - 8) * scale.astype(np.float32).reshape(VOCAB, 1)
    _assert_computes_as_table(src, out, dequantized, samples)


def _assert_computes_as_table(src, out, dequantized, samples):
    """The saved file `out` computes what `src` computes with its table "word" replaced by
    `dequantized` (the stored integers dequantized in numpy)."""
    reference = onnx.load(str(src))
    word = next(t for t in reference.graph.initializer if t.name == "word")
    word.CopyFrom(numpy_helper.from_array(dequantized, "word"))
    for feeds in samples:
        (a,), (b,) = run(reference, feeds), run(out, feeds)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_a_dry_run_plan_with_embed_rows_applies_as_written(tmp_path):
    model = _fused_model()
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    plan = onnxsurgery.quant_plan(src, min_elements=512, samples=_samples()).to_dict()
    lowerings = {r["name"]: r["lowering"] for r in plan["weights"]}
    assert lowerings["word"] == "embed_rows" and lowerings["qkv"] == "scaled"
    report = onnxsurgery.quant_file(src, out, plan=plan, samples=_samples())
    assert {name: _records(report)[name]["lowering"] for name in lowerings} == lowerings
    assert _worst_rel(model, out) < 0.05


def _bfloat16(name: str, values: np.ndarray) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.BFLOAT16, values.shape,
                              (values.view(np.uint32) >> 16).astype(np.uint16).tobytes(), raw=True)


def _bfloat16_model() -> onnx.ModelProto:
    """A bfloat16 checkpoint's export: bf16 -> Cast -> Gather (a table), bf16 -> Cast -> MatMul."""
    nodes = [helper.make_node("Cast", ["table_bf16"], ["table"], to=TensorProto.FLOAT),
             helper.make_node("Gather", ["table", "ids"], ["h"]),
             helper.make_node("Cast", ["w_bf16"], ["w"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["h", "w"], ["y"])]
    inits = [_bfloat16("table_bf16", builders.rand((256, 64), 1)),
             _bfloat16("w_bf16", builders.rand((64, 96), 2) * 0.1)]
    graph = helper.make_graph(nodes, "g", [builders.vi("ids", TensorProto.INT64, [1, 7])],
                              [builders.vi("y", shape=[1, 7, 96])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = builders.IR
    return model


BF16_IDS = np.array([[0, 5, 17, 99, 128, 200, 255]], np.int64)


@pytest.mark.parametrize("options, bits", [({"keep_quantized": True}, 8), ({"dtype": "int4"}, 4)],
                         ids=["keep-quantized", "int4"])
def test_bfloat16_weights_kept_quantized_feed_their_readers_directly(tmp_path, options, bits):
    """A bfloat16 checkpoint's export, weights kept quantized: the MatMul weight's
    DequantizeLinear feeds the MatMul in float32, blocked along its input axis (what onnxruntime
    fuses into MatMulNBits); the table's integer rows are gathered for the ids behind its Cast
    (a DequantizeLinear would dequantize all of it at every run), in the bits asked for; the
    bfloat16 table and its Cast are gone, and the file is smaller than the default int8's."""
    model = _bfloat16_model()
    src, out, int8_out = tmp_path / "in.onnx", tmp_path / "q.onnx", tmp_path / "int8.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, min_elements=512, samples=[{"ids": BF16_IDS}], **options)
    onnxsurgery.quant_file(src, int8_out, min_elements=512, samples=[{"ids": BF16_IDS}])
    saved = onnx.load(str(out))
    records = _records(report)
    assert records["w_bf16"]["lowering"] == "dq" and records["w_bf16"]["axis"] == 0
    table = records["table_bf16"]
    assert table["lowering"] == "embed_rows" and table["dtype"] == ("int8" if bits == 8 else "int4")
    assert "rows gathered" in table["why"] and "Gather through a Cast" in table["why"]
    dq = _producer(saved, _reader(saved, "MatMul").input[1])
    assert dq.op_type == "DequantizeLinear" and {a.name: a.i for a in dq.attribute}["axis"] == 0
    assert not any(t.data_type == TensorProto.BFLOAT16 for t in saved.graph.initializer)
    assert _row_bytes(saved, "ids", 256) == 64 * bits // 8
    if bits == 4:
        assert out.stat().st_size < int8_out.stat().st_size
    (a,), (b,) = run(model, {"ids": BF16_IDS}), run(out, {"ids": BF16_IDS})
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < (0.03 if bits == 8 else 0.3)
