"""quant as a plan: --dry-run shows every decision and writes nothing; the real run applies the
same records; --plan FILE applies an edited plan exactly, and refuses what the model cannot take."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import builders
import onnxsurgery
from conftest import run
from onnxsurgery.cli import main
from onnxsurgery.errors import OnnxSurgeryError, OptionError, PlanError


def _invoke(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)])


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(), str(path))
    return path


def _feeds():
    return {"ids": np.array([3, 77], np.int64), "c": np.array(True)}


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, model_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    r = _invoke("quant", model_path, "--dry-run", "--min-elements", "1024")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    for name in ("W_mm", "W_const", "W_if", "E"):
        assert name in r.output
    assert "stored as" in r.output and "why" in r.output
    assert "1 smaller weight left float (below --min-elements)" in r.output


def test_a_dry_run_of_several_models_names_the_one_it_refuses(tmp_path, model_path):
    """`quant A B --dry-run` plans B too where B exists (it is then no output): a refusal of B
    names it, and says what is wrong with it, in one line."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((40, 30), np.float32), "w")
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [40, 30])], [w])
    other = tmp_path / "other.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(other))
    r = _invoke("quant", model_path, other, "--dry-run", "--lowering", "dq", "--granularity", "block")
    assert r.exit_code == 2
    assert f"error: {other}:" in r.output and "opset" in r.output and len(r.output.strip().splitlines()) == 1


def test_the_real_run_applies_the_records_the_dry_run_shows(tmp_path, model_path):
    dry = _invoke("quant", model_path, "--dry-run", "--json", "--min-elements", "1024")
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.output)["weights"]
    assert {w["name"] for w in planned} == {"W_mm", "W_const", "W_if", "E", "small"}
    assert {k for k in planned[0]} >= {"name", "consumers", "dtype", "granularity", "block_size", "symmetric",
                                       "lowering", "bytes_before", "bytes_after", "why"}
    real = _invoke("quant", model_path, tmp_path / "q.onnx", "--json", "--min-elements", "1024",
                   "--no-verify")
    assert real.exit_code == 0, real.output
    assert json.loads(real.output)["weights"] == planned
    assert {w["name"]: w["lowering"] for w in planned}["E"] == "gather"  # the embedding table
    assert {w["name"]: w["dtype"] for w in planned}["small"] == "float"


def test_an_edited_plan_is_applied_exactly(tmp_path, model_path):
    plan = json.loads(_invoke("quant", model_path, "--dry-run", "--json", "--min-elements", "1024").output)
    records = {w["name"]: w for w in plan["weights"]}
    records["W_const"].update(dtype="float", lowering=None)  # stays float
    records["W_mm"].update(dtype="int4", granularity="block", block_size=16, axis=0, symmetric=True,
                           lowering="dq", rounding="nearest")
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = tmp_path / "q.onnx"
    r = _invoke("quant", model_path, out, "--plan", tmp_path / "plan.json", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    applied = {w["name"]: w for w in report["weights"]}
    assert applied["W_const"]["dtype"] == "float" and applied["W_mm"]["dtype"] == "int4"
    saved = onnx.load(str(out))
    assert saved.opset_import[0].version == 21  # 4-bit DequantizeLinear needs it: upgraded as a plan asks
    int4 = [t for t in saved.graph.initializer if t.data_type == onnx.TensorProto.INT4]
    assert [list(t.dims) for t in int4] == [[64, 64]]
    consts = [n for n in saved.graph.node if n.op_type == "Constant" and n.output[0] == "W_const"]
    values = onnx.numpy_helper.to_array(consts[0].attribute[0].t) if consts else None
    original = next(n for n in builders.quant_cases().graph.node if n.output[0] == "W_const")
    assert values is not None and np.array_equal(values, onnx.numpy_helper.to_array(original.attribute[0].t))
    (a,), (b,) = run(builders.quant_cases(), _feeds()), run(out, _feeds())
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.2


@pytest.mark.parametrize("edit, message", [
    ({"name": "nope", "dtype": "float16", "lowering": "cast"},
     "plan weight 'nope': the model has no float constant of that name"),
    ({"name": "W_mm", "dtype": "int3"}, 'plan weight \'W_mm\': dtype "int3" is not one of "int8"'),
    ({"name": "W_mm", "dtype": "int8", "lowering": "fold"}, 'lowering "fold" is not one of null, "dq"'),
    ({"name": "W_mm", "dtype": "int8", "symmetric": "yes"}, 'symmetric must be true, false or null, not "yes"'),
    ({"name": "W_mm", "dtype": "int8", "granularity": "channel", "symmetric": True, "lowering": "gather"},
     "plan weight 'W_mm': lowering gather does not fit"),
    ({"name": "W_mm", "dtype": "int8", "granularity": "block", "block_size": 48, "symmetric": True,
      "lowering": "arith"}, "plan weight 'W_mm': block_size 48 does not divide axis 0 (64)"),
    ({"name": "W_mm", "dtype": "float16", "lowering": "cast", "colour": "red"}, "plan weight 'W_mm': unknown key"),
])
def test_a_plan_the_model_cannot_take_is_refused_naming_the_weight(tmp_path, model_path, edit, message):
    (tmp_path / "plan.json").write_text(json.dumps({"weights": [edit]}))
    r = _invoke("quant", model_path, tmp_path / "q.onnx", "--plan", tmp_path / "plan.json")
    assert r.exit_code == 2 and not (tmp_path / "q.onnx").exists()
    assert r.output.strip().splitlines() == [r.output.strip()] and message in r.output, r.output


def test_int4_on_a_conv_under_tensorrt_is_refused(tmp_path):
    src = tmp_path / "trt.onnx"
    onnx.save(builders.tensorrt_prep_model(opset=17), str(src))
    plan = {"weights": [{"name": "Wc", "dtype": "int4", "granularity": "block", "block_size": 16,
                         "symmetric": True, "lowering": "dq"}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    r = _invoke("quant", src, tmp_path / "q.onnx", "--target", "tensorrt", "--plan", tmp_path / "plan.json")
    assert r.exit_code == 2 and "plan weight 'Wc': target tensorrt: read by Conv" in r.output, r.output


def test_weights_a_plan_leaves_out_stay_float(tmp_path, model_path):
    plan = {"weights": [{"name": "W_if", "dtype": "int8", "granularity": "channel", "symmetric": True,
                         "lowering": "arith"}]}
    report = onnxsurgery.quant_file(model_path, tmp_path / "q.onnx", plan=plan, samples=[_feeds()])
    assert report.pass_report("quantize").details["quantized"] == ["W_if"]
    assert {w["name"]: w["why"] for w in report.weights}["W_mm"] == "not in the plan"


@pytest.mark.parametrize("args, words", [
    (["--target", "tensorrt", "--asymmetric"], "symmetric"),
    (["--target", "tensorrt", "--dtype", "uint4"], "int8 or int4"),
    (["--target", "tensorrt", "--dtype", "uint8"], "int8 or int4"),
    (["--fp16", "--levels", "16"], "alternatives"),
    (["--levels", "16", "--keep-quantized"], "--keep-quantized"),
    (["--lowering", "arith", "--keep-quantized"], "--lowering arith"),
    (["--fp16", "--keep-quantized"], "--keep-quantized"),
    (["--fp16", "--dtype", "int4"], "--dtype int4 does not apply"),
    (["--granularity", "tensor", "--block-size", "64"], "--block-size applies to blocks"),
    (["--dynamic", "--dtype", "int4"], "--dynamic"),
    (["--dynamic", "--target", "tensorrt"], "--dynamic"),
    (["--plan", "x.json", "--dtype", "int4"], "--plan"),
    (["--fp16", "--asymmetric"], "--asymmetric does not apply"),
    (["--levels", "16", "--rounding", "balanced"], "--rounding balanced does not apply"),
    (["--max-error", "0.1", "--no-verify"], "--max-error"),
    (["--dry-run", "--external-data"], "--dry-run"),
])
def test_contradicting_options_exit_2_in_one_house_style(tmp_path, model_path, args, words):
    r = _invoke("quant", model_path, tmp_path / "q.onnx", *args)
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("onnxsurgery: error: ") and words in line
    assert not (tmp_path / "q.onnx").exists()


def test_option_errors_from_the_api_are_value_errors_too(model_path, tmp_path):
    with pytest.raises(OptionError) as caught:
        onnxsurgery.quant_file(model_path, tmp_path / "q.onnx", fp16=True, levels=16)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, OnnxSurgeryError)
    with pytest.raises(OptionError, match="unknown quant option 'colour'"):
        onnxsurgery.quant_file(model_path, tmp_path / "q.onnx", colour="red")
    with pytest.raises(PlanError):
        onnxsurgery.quant_file(model_path, tmp_path / "q.onnx", plan={"weights": [{"name": "x"}]})


def test_tensorrt_with_fp16_is_a_normal_preparation(tmp_path, model_path):
    r = _invoke("quant", model_path, tmp_path / "q.onnx", "--target", "tensorrt", "--fp16", "--min-elements", "1024")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, note", [
    (["--include", "nomatch*"], "--include nomatch* matched no weight"),
    (["--exclude", "*"], "--exclude * matched every weight"),
])
def test_a_selection_that_matches_nothing_says_so(tmp_path, model_path, args, note):
    r = _invoke("quant", model_path, tmp_path / "q.onnx", "--min-elements", "1024", *args)
    assert r.exit_code == 0, r.output
    assert note in r.output


# -- issue 49, item 8: a plan edited as a person would -------------------------------------------


def _dry_plan(model_path, *args) -> dict:
    r = _invoke("quant", model_path, "--dry-run", "--json", "--min-elements", "1024", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _with_dtype(plan: dict, name: str, dtype: str) -> dict:
    """`plan` with one field of one record changed, as a person edits the JSON."""
    edited = json.loads(json.dumps(plan))
    next(w for w in edited["weights"] if w["name"] == name)["dtype"] = dtype
    return edited


@pytest.mark.parametrize("dtype", ["float", "float16", "int8", "int4", "uint8"])
@pytest.mark.parametrize("name", ["E", "W_mm", "W_const", "small"])
def test_a_one_field_dtype_edit_applies_with_the_rest_derived_again(tmp_path, model_path, name, dtype):
    """Every weight of the model (a Gather table, a MatMul weight, a Constant node, one below
    --min-elements), each dtype: the edit applies, and the record applied stores that dtype with
    fields that fit it (a float record keeps no integer fields, a float16 one is a Cast)."""
    plan = _dry_plan(model_path)
    (tmp_path / "plan.json").write_text(json.dumps(_with_dtype(plan, name, dtype)))
    out = tmp_path / "q.onnx"
    r = _invoke("quant", model_path, out, "--plan", tmp_path / "plan.json", "--json")
    assert r.exit_code == 0, r.output
    applied = {w["name"]: w for w in json.loads(r.output)["weights"]}[name]
    assert applied["dtype"] == dtype
    if dtype == "float":
        assert [applied[k] for k in ("lowering", "granularity", "block_size", "symmetric")] == [None] * 4
    elif dtype == "float16":
        assert applied["lowering"] == "cast" and applied["granularity"] is None
    else:
        assert applied["lowering"] not in (None, "cast", "levels") and applied["symmetric"] in (True, False)
        assert (applied["block_size"] is not None) == (applied["granularity"] == "block")
    (a,), (b,) = run(builders.quant_cases(), _feeds()), run(out, _feeds())
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < 0.2


def test_the_issues_edit_a_gather_table_set_to_float_applies(tmp_path, model_path):
    """Issue 49's report: `"dtype": "float"` on a record whose lowering is gather was refused
    ("lowering 'gather' does not store float; choose None, levels")."""
    plan = _dry_plan(model_path)
    assert {w["name"]: w["lowering"] for w in plan["weights"]}["E"] == "gather"
    records = onnxsurgery.quant_plan(model_path, plan=_with_dtype(plan, "E", "float")).weights
    table = next(w for w in records if w.name == "E")
    assert (table.dtype, table.lowering, table.granularity, table.changes) == ("float", None, None, False)


def test_a_lowering_only_int8_takes_is_derived_again_for_int4_as_the_default_stores_it(model_path, tmp_path):
    """`scaled` is int8 only: an int8 -> int4 edit of such a record gets what `--dtype int4`
    stores for that weight, and the opset that needs (4-bit DequantizeLinear: 21)."""
    plan = _dry_plan(model_path)
    lowerings = {w["name"]: w["lowering"] for w in plan["weights"]}
    lean = next(n for n, lowering in lowerings.items() if lowering == "scaled")
    edited = onnxsurgery.quant_plan(model_path, plan=_with_dtype(plan, lean, "int4"))
    default = onnxsurgery.quant_plan(model_path, dtype="int4", min_elements=1024)
    got, want = edited.record(lean), default.record(lean)
    assert (got.dtype, got.lowering, got.granularity, got.block_size, got.symmetric) == \
        (want.dtype, want.lowering, want.granularity, want.block_size, want.symmetric)
    assert edited.opset == default.opset == 21
    assert got.why.startswith("dtype int4 from the plan, the rest as the default stores it")


def test_a_record_naming_only_its_dtype_is_completed(model_path):
    plan = onnxsurgery.quant_plan(model_path, plan={"weights": [{"name": "W_mm", "dtype": "int8"}]})
    record = plan.record("W_mm")
    assert record.dtype == "int8" and record.lowering and record.granularity and record.symmetric is not None


def test_fields_a_person_sets_and_that_fit_are_kept(model_path):
    plan = onnxsurgery.quant_plan(model_path, plan={"weights": [
        {"name": "W_mm", "dtype": "int4", "granularity": "block", "block_size": 16, "symmetric": True}]})
    record = plan.record("W_mm")
    assert (record.granularity, record.block_size, record.symmetric) == ("block", 16, True) and record.lowering
    # a lowering left null is chosen for the granularity set, as --granularity tensor would choose it
    plan = onnxsurgery.quant_plan(model_path, plan={"weights": [
        {"name": "W_mm", "dtype": "int8", "granularity": "tensor", "lowering": None}]})
    assert plan.record("W_mm").granularity == "tensor" and plan.record("W_mm").lowering == "arith"


def test_a_refusal_still_due_speaks_json(tmp_path, model_path):
    """A lowering that fits no dtype of this weight is still refused, and in JSON's words."""
    plan = {"weights": [{"name": "W_mm", "dtype": "int8", "granularity": "channel", "symmetric": None,
                         "lowering": "nope"}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    r = _invoke("quant", model_path, tmp_path / "q.onnx", "--plan", tmp_path / "plan.json")
    assert r.exit_code == 2 and "None" not in r.output and "null" in r.output, r.output
