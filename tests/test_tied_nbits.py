"""A tied token table under --target onnxruntime --dtype int4 (lowering `tied_nbits`): stored
once, 4-bit in blocks along the hidden axis, in MatMulNBits' layout; the lm_head reads it with
com.microsoft MatMulNBits and the token lookup with GatherBlockQuantized, both on the same
integers and scales, and no float copy of the table is left in the file."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from conftest import run
from onnxsurgery.cli import main
from test_tied_table import HIDDEN, VOCAB, _tied_model

BLOCK = 32
FEEDS = {"ids": np.arange(8, dtype=np.int64) * 37}


def _quantized(tmp_path, model, **options):
    onnx.save(model, str(tmp_path / "in.onnx"))
    # the table only (W, 64x64, stays float): the outputs then show its lowering alone
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", min_elements=8192, **options)
    return report, onnx.load(str(tmp_path / "q.onnx"))


def _dequantized_table(saved: onnx.ModelProto, bits: int) -> np.ndarray:
    """The [vocab, hidden] table the saved MatMulNBits lm_head reads, rebuilt from its initializers
    as onnxruntime's spec says: low nibble first, zero point 2^(bits - 1) unless given."""
    (head,) = [n for n in saved.graph.node if n.op_type == "MatMulNBits" and n.output[0] == "logits"]
    inits = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    packed, scales = inits[head.input[1]], inits[head.input[2]].reshape(VOCAB, -1)

    def unpack(a):
        a = a.reshape(VOCAB, -1)
        return a if bits == 8 else np.stack([a & 15, a >> 4], axis=-1).reshape(VOCAB, -1)

    zero = unpack(inits[head.input[3]])[:, :scales.shape[1]] if len(head.input) > 3 else 2 ** (bits - 1)
    q = unpack(packed).reshape(VOCAB, -1, BLOCK).astype(np.float32)
    zero = np.asarray(zero, np.float32).reshape(VOCAB, -1, 1) if np.ndim(zero) else np.float32(zero)
    return ((q - zero) * scales[..., None]).reshape(VOCAB, HIDDEN)


def _with_table(model: onnx.ModelProto, table: np.ndarray, head: str) -> onnx.ModelProto:
    """`model` with its float table replaced by `table` ([vocab, hidden]; stored transposed when mirrored)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    (init,) = [t for t in copy.graph.initializer if t.name == "E"]
    init.CopyFrom(numpy_helper.from_array(table.T.copy() if head == "mirrored" else table, "E"))
    return copy


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("head", ["transpose", "gemm", "mirrored"])
def test_one_4bit_table_serves_matmulnbits_and_gatherblockquantized(tmp_path, head, symmetric):
    model = _tied_model(head)
    report, saved = _quantized(tmp_path, model, dtype="int4", target="onnxruntime", symmetric=symmetric)
    record = {w["name"]: w for w in report.weights}["E"]
    hidden_axis = 0 if head == "mirrored" else 1
    assert (record["lowering"], record["dtype"], record["granularity"], record["axis"], record["block_size"]) == \
        ("tied_nbits", "int4", "block", hidden_axis, BLOCK)
    assert "MatMulNBits and GatherBlockQuantized" in record["why"]
    nodes = saved.graph.node
    (head_node,) = [n for n in nodes if n.op_type == "MatMulNBits" and n.output[0] == "logits"]
    (lookup,) = [n for n in nodes if n.op_type == "GatherBlockQuantized"]
    (reshape,) = [n for n in nodes if n.output[0] == lookup.input[0]]
    assert reshape.op_type == "Reshape" and reshape.input[0] == head_node.input[1]  # the same integers
    assert lookup.input[2] == head_node.input[2]  # the same scales
    assert (len(lookup.input) > 3) == (len(head_node.input) > 3) == (not symmetric)
    if not symmetric:
        assert lookup.input[3] == head_node.input[3]  # the same zero points
    inits = {t.name: t for t in saved.graph.initializer}
    assert inits[head_node.input[1]].data_type == TensorProto.UINT8
    assert list(inits[head_node.input[1]].dims) == [VOCAB, HIDDEN // BLOCK, BLOCK // 2]
    table_sized = [t.name for t in saved.graph.initializer if np.prod(t.dims) * 2 >= VOCAB * HIDDEN]
    assert table_sized == [head_node.input[1]]  # no float (or other) copy of the table
    assert not [n for n in nodes if n.op_type in ("Gather", "Gemm", "Transpose")]

    # the outputs are the float model's with the stored table dequantized; that table carries
    # the error the report gives for E
    table = _dequantized_table(saved, bits=4)
    original = numpy_helper.to_array([t for t in model.graph.initializer if t.name == "E"][0])
    original = original.T if head == "mirrored" else original
    error = {e["name"]: e for e in report.pass_report("quantize").details["largest_errors"]}["E"]["rel_l2_error"]
    assert np.linalg.norm(table - original) / np.linalg.norm(original) == pytest.approx(error, rel=1e-3)
    assert {a.name: a.i for a in head_node.attribute}["accuracy_level"] == 4
    (got,), (want,) = run(builders.in_float_arithmetic(tmp_path / "q.onnx"), FEEDS), \
        run(_with_table(model, table, head), FEEDS)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.parametrize("head", ["transpose", "mirrored"])
def test_the_default_int8_for_onnxruntime_shares_an_8bit_table(tmp_path, head):
    """int8 left to quant: the table in 8 bits, blocks along the hidden axis; the lm_head's
    MatMulNBits at accuracy_level 4 (its float 8-bit kernel is very slow), which quantizes the
    hidden state per block: close to, not exactly, the dequantized table's outputs."""
    model = _tied_model(head)
    report, saved = _quantized(tmp_path, model, target="onnxruntime")
    record = {w["name"]: w for w in report.weights}["E"]
    assert (record["lowering"], record["dtype"], record["granularity"]) == ("tied_nbits", "int8", "block")
    assert "not MatMulNBits" not in record["why"]
    (head_node,) = [n for n in saved.graph.node if n.op_type == "MatMulNBits"]
    (lookup,) = [n for n in saved.graph.node if n.op_type == "GatherBlockQuantized"]
    assert {a.name: a.i for a in head_node.attribute}["accuracy_level"] == 4
    assert {a.name: a.i for a in lookup.attribute}["bits"] == 8 == {a.name: a.i for a in head_node.attribute}["bits"]
    table = _dequantized_table(saved, bits=8)
    assert {a.name: a.i for a in head_node.attribute}["accuracy_level"] == 4
    (got,), (want,) = run(builders.in_float_arithmetic(tmp_path / "q.onnx"), FEEDS), \
        run(_with_table(model, table, head), FEEDS)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.02
    original = run(model, FEEDS)[0]
    assert np.linalg.norm(got - original) / np.linalg.norm(original) < 0.05


@pytest.mark.parametrize("blocks, why", [({"block_size": 32, "axis": 0}, "along the hidden axis"),
                                         ({"block_size": 8, "axis": 1}, "power of two >= 16")])
def test_a_plan_asking_for_other_blocks_is_refused(tmp_path, blocks, why):
    onnx.save(_tied_model("transpose"), str(tmp_path / "in.onnx"))
    plan = {"weights": [{"name": "E", "dtype": "int4", "granularity": "block", "symmetric": True,
                         "lowering": "tied_nbits", **blocks}]}
    with pytest.raises(onnxsurgery.PlanError, match=f"plan weight 'E': lowering tied_nbits does not fit.*{why}"):
        onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", plan=plan)


def test_the_dry_run_plan_is_what_the_real_run_does(tmp_path):
    onnx.save(_tied_model("mirrored"), str(tmp_path / "in.onnx"))
    args = ["-q", "quant", str(tmp_path / "in.onnx"), "--target", "onnxruntime", "--dtype", "int4",
            "--min-elements", "8192", "--json"]
    dry = CliRunner().invoke(main, [*args, "--dry-run"])
    real = CliRunner().invoke(main, [*args[:3], str(tmp_path / "q.onnx"), *args[3:], "--no-verify"])
    assert dry.exit_code == 0 and real.exit_code == 0, dry.output + real.output
    planned = json.loads(dry.output)["weights"]
    assert {w["name"]: w["lowering"] for w in planned}["E"] == "tied_nbits"
    assert json.loads(real.output)["weights"] == planned


def _with_microsoft_op(model: onnx.ModelProto) -> onnx.ModelProto:
    """The tied model with its hidden state through com.microsoft Gelu, as a builder export has
    com.microsoft ops (GroupQueryAttention...): only onnxruntime runs it already."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    (matmul,) = [n for n in copy.graph.node if n.op_type == "MatMul" and n.output[0] == "h"]
    matmul.output[0] = "h0"
    copy.graph.node.append(helper.make_node("Gelu", ["h0"], ["h"], domain="com.microsoft"))
    copy.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return copy


def test_the_default_target_shares_the_4bit_table_only_in_a_model_onnxruntime_alone_runs(tmp_path):
    model = _tied_model("mirrored")
    report, _ = _quantized(tmp_path, model, dtype="int4")
    assert {w["name"]: w["lowering"] for w in report.weights}["E"] == "tied"  # standard ops only
    report, saved = _quantized(tmp_path, _with_microsoft_op(model), dtype="int4")
    record = {w["name"]: w for w in report.weights}["E"]
    assert (record["lowering"], record["dtype"]) == ("tied_nbits", "int4")
    assert "com.microsoft" in record["why"]
    (got,), (want,) = run(tmp_path / "q.onnx", FEEDS), run(_with_microsoft_op(model), FEEDS)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.2
    report, _ = _quantized(tmp_path, _with_microsoft_op(model))  # int8: the table in 8 bits
    assert {w["name"]: (w["lowering"], w["dtype"]) for w in report.weights}["E"] == ("tied_nbits", "int8")
    report, _ = _quantized(tmp_path, model)  # without com.microsoft ops: the `tied` table
    assert {w["name"]: w["lowering"] for w in report.weights}["E"] == "tied"
