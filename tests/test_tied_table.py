"""A token table that is also the lm_head (small language models tie them): one int8 table with
one scale per row serves the Gather (rows dequantized after the lookup) and the lm_head (the
scale after the MatMul), so neither path holds a float copy at run time beyond what the float
model itself folds (its transposed read)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from conftest import run

VOCAB, HIDDEN = 512, 64


def _tied_model(head: str) -> onnx.ModelProto:
    """ids -> Gather(E) -> MatMul(W) -> lm_head(E) -> logits; the lm_head reads E through a
    Transpose (then a MatMul) or as a Gemm's transposed B; or, as onnxruntime-genai's builder
    writes it ("mirrored"), E is stored [hidden, vocab] as the lm_head's B and the embedding
    gathers from its Transpose."""
    if head == "mirrored":
        nodes = [helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
                 helper.make_node("Gather", ["Et", "ids"], ["x"], axis=0),
                 helper.make_node("MatMul", ["x", "W"], ["h"]),
                 helper.make_node("MatMul", ["h", "E"], ["logits"])]
        inits = [numpy_helper.from_array(builders.rand((HIDDEN, VOCAB), 1) * 0.1, "E"),
                 numpy_helper.from_array(builders.rand((HIDDEN, HIDDEN), 2) * 0.1, "W")]
        return builders.model(nodes, [builders.vi("ids", TensorProto.INT64, [8])],
                              [builders.vi("logits", shape=[8, VOCAB])], inits)
    nodes = [helper.make_node("Gather", ["E", "ids"], ["x"], axis=0),
             helper.make_node("MatMul", ["x", "W"], ["h"])]
    if head == "transpose":
        nodes += [helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
                  helper.make_node("MatMul", ["h", "Et"], ["logits"])]
    else:
        nodes += [helper.make_node("Gemm", ["h", "E"], ["logits"], transB=1)]
    inits = [numpy_helper.from_array(builders.rand((VOCAB, HIDDEN), 1) * 0.1, "E"),
             numpy_helper.from_array(builders.rand((HIDDEN, HIDDEN), 2) * 0.1, "W")]
    return builders.model(nodes, [builders.vi("ids", TensorProto.INT64, [8])],
                          [builders.vi("logits", shape=[8, VOCAB])], inits)


@pytest.mark.parametrize("head", ["transpose", "gemm", "mirrored"])
def test_one_int8_table_serves_the_gather_and_the_lm_head(tmp_path, head):
    model = _tied_model(head)
    onnx.save(model, str(tmp_path / "in.onnx"))
    feeds = {"ids": np.arange(8, dtype=np.int64) * 37}
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", samples=[feeds])
    labels = {w["name"]: w["lowering"] for w in report.weights}
    assert labels["E"] == "tied"
    graph = onnx.load(str(tmp_path / "q.onnx")).graph
    tables = [t for t in graph.initializer if sorted(t.dims) == sorted([VOCAB, HIDDEN])]
    assert [t.data_type for t in tables] == [TensorProto.INT8]  # stored once, in 8 bits
    readers = sorted(n.op_type for n in graph.node if tables[0].name in n.input)
    # the row lookup, and the lm_head's Transpose of the int8 table (then a Cast) or its Cast (Gemm);
    # folded at load into the one float table the lm_head reads
    assert readers == {"transpose": ["Gather", "Transpose"], "gemm": ["Cast", "Gather"],
                       "mirrored": ["Cast", "Transpose"]}[head]
    (a,), (b,) = run(model, feeds), run(tmp_path / "q.onnx", feeds)
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.02
    assert np.mean(a.argmax(-1) == b.argmax(-1)) >= 0.75


def test_a_plan_may_ask_for_tied_only_where_it_fits(tmp_path):
    onnx.save(builders.quant_cases(), str(tmp_path / "in.onnx"))
    plan = {"weights": [{"name": "E", "dtype": "int8", "granularity": "channel", "axis": 0, "symmetric": True,
                         "lowering": "tied"}]}
    with pytest.raises(onnxsurgery.PlanError, match="plan weight 'E': lowering tied does not fit"):
        onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", plan=plan)


def test_int4_keeps_a_tied_table_in_int8(tmp_path, int4_forms_alone):
    """Kept 4-bit (DequantizeLinear), the table was dequantized and transposed whole at every
    decoding step (SmolLM2-135M: 228 ms a token against 38 ms this way); --dtype int4 stores
    the other weights in 4 bits and this one as the tied int8 table."""
    model = _tied_model("transpose")
    onnx.save(model, str(tmp_path / "in.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", dtype="int4", min_elements=1024)
    records = {w["name"]: w for w in report.weights}
    assert (records["E"]["dtype"], records["E"]["lowering"]) == ("int8", "tied")
    assert "not 4-bit" in records["E"]["why"] and records["W"]["dtype"] == "int4"
