"""Issue 57 (a newcomer's first hour, second pass) and the smaller items of issue 59: each item
that is not its own file's, tested through the CLI as a newcomer meets it."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from conftest import builders
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.cli import main


def invoke(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)])


def one_error_line(r, *words: str) -> None:
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("onnxsurgery: error: "), r.output
    assert all(w in r.output for w in words), r.output


@pytest.fixture
def folder(tmp_path, save):
    """A model folder as optimum writes one: two models and a config."""
    f = tmp_path / "export"
    f.mkdir()
    onnx.save(builders.quant_cases(), str(f / "a.onnx"))
    onnx.save(builders.duplicate_initializers(size=64), str(f / "b.onnx"))
    (f / "config.json").write_text("{}")
    return f


# item 3: the plan round trip as the README words it


def test_a_plan_that_is_not_json_names_the_flag_that_writes_one(tmp_path, save):
    src = save(builders.quant_cases(), "q.onnx")
    r = invoke("quant", src, "--dry-run")
    assert r.exit_code == 0 and r.output.startswith("plan:")
    (tmp_path / "plan.txt").write_text(r.output)
    r = invoke("quant", src, tmp_path / "o.onnx", "--plan", tmp_path / "plan.txt")
    one_error_line(r, "is not JSON", "--dry-run --json")
    assert not (tmp_path / "o.onnx").exists()


def test_the_plan_round_trip_with_json(tmp_path, save):
    src = save(builders.quant_cases(), "q.onnx")
    r = invoke("quant", src, "--dry-run", "--json")
    (tmp_path / "plan.json").write_text(r.output)
    r = invoke("quant", src, tmp_path / "o.onnx", "--plan", tmp_path / "plan.json")
    assert r.exit_code == 0, r.output
    assert "every weight as the plan says" in r.output
    # `quant IN OUT --dry-run`, as the zoo and many a user type it: OUT is what it would write
    r = invoke("quant", src, tmp_path / "not_yet.onnx", "--dry-run", "--json")
    assert r.exit_code == 0 and json.loads(r.output) == json.loads((tmp_path / "plan.json").read_text()), r.output
    assert not (tmp_path / "not_yet.onnx").exists()


# item 4: a folder's plan, several inputs, info and check of a folder


def test_a_folders_plan_is_taken_by_its_own_command(tmp_path, folder):
    r = invoke("quant", folder, "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    plans = json.loads(r.output)
    assert sorted(plans) == ["a.onnx", "b.onnx"]
    (tmp_path / "fp.json").write_text(r.output)
    r = invoke("quant", folder, tmp_path / "out", "--plan", tmp_path / "fp.json")
    assert r.exit_code == 0, r.output
    assert r.output.count("every weight as the plan says") == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.onnx", "b.onnx", "config.json"]
    # one model's plan for a folder of two: refused, saying what to give
    one = json.dumps(plans["a.onnx"])
    (tmp_path / "one.json").write_text(one)
    one_error_line(invoke("quant", folder, tmp_path / "out2", "--plan", tmp_path / "one.json"), "a plan per model")
    # the folder's plan for one file: refused, not "a plan is a JSON object with a list under ..."
    one_error_line(invoke("quant", folder / "a.onnx", tmp_path / "x.onnx", "--plan", tmp_path / "fp.json"),
                   "one model's plan")


def test_quant_takes_several_inputs_into_a_folder_as_shrink_does(tmp_path, folder):
    dest = tmp_path / "dest"
    dest.mkdir()
    r = invoke("quant", folder / "a.onnx", folder / "b.onnx", dest)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in dest.iterdir()) == ["a.onnx", "b.onnx"]
    assert f"{folder / 'a.onnx'} -> {dest / 'a.onnx'}" in r.output and f"{dest / 'b.onnx'}" in r.output


def test_info_and_check_take_a_model_folder(folder):
    r = invoke("info", folder)
    assert r.exit_code == 0, r.output
    assert f"{folder / 'a.onnx'}:" in r.output and f"{folder / 'b.onnx'}:" in r.output
    data = json.loads(invoke("info", folder, "--json").output)
    assert sorted(data) == [str(folder / "a.onnx"), str(folder / "b.onnx")]
    r = invoke("check", folder)
    assert r.exit_code == 0, r.output
    assert r.output.count("0 findings against") == 2
    empty = folder.parent / "empty"
    empty.mkdir()
    one_error_line(invoke("info", empty), "no .onnx file")


# item 13 and issue 59: check's next step, and the ai.onnx.ml operators by their name


def test_check_says_what_to_do_next_on_a_default_int8_model(tmp_path, save):
    src = save(builders.quant_cases(), "q.onnx")
    assert invoke("quant", src, tmp_path / "q8.onnx").exit_code == 0
    r = invoke("check", tmp_path / "q8.onnx")
    assert r.exit_code == 1
    assert "next:" in r.output and "quant FLOAT_MODEL OUT --target tensorrt" in r.output
    assert invoke("quant", src, tmp_path / "qt.onnx", "--target", "tensorrt").exit_code == 0
    r = invoke("check", tmp_path / "qt.onnx")
    assert r.exit_code == 0 and "next:" not in r.output, r.output


def tree_ensemble() -> onnx.ModelProto:
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
                            nodes_featureids=[0], nodes_modes=["LEAF"], nodes_nodeids=[0], nodes_treeids=[0],
                            nodes_values=[0.0], nodes_truenodeids=[0], nodes_falsenodeids=[0],
                            target_ids=[0], target_nodeids=[0], target_treeids=[0], target_weights=[1.5])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def test_check_calls_ai_onnx_ml_operators_standard_not_custom(save):
    r = invoke("check", save(tree_ensemble(), "trees.onnx"))
    assert r.exit_code == 1
    assert "TreeEnsembleRegressor" in r.output and "ai.onnx.ml" in r.output
    assert "custom op" not in r.output
    assert "next:" in r.output and "quant FLOAT_MODEL" not in r.output


def test_a_conv_only_models_header_names_no_matmulnbits_fusion(tmp_path, save):
    """Issue 59: the verification header of a Conv-only model said "DequantizeLinear -> MatMul
    fused into MatMulNBits" (fixed in verify.py before this issue's pass; kept here)."""
    w = builders.rand((32, 16, 3, 3), 1) * 0.1
    conv = builders.model([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])],
                          [builders.vi("x", shape=[1, 16, 8, 8])], [builders.vi("y", shape=[1, 32, 8, 8])],
                          [numpy_helper.from_array(w, "W")])
    src = save(conv, "conv.onnx")
    for args in ([], ["--lowering", "dq"], ["--dtype", "int4"]):
        r = invoke("quant", src, tmp_path / "c.onnx", *args)
        assert r.exit_code == 0, r.output
        assert "verification" in r.output and "MatMulNBits" not in r.output, r.output


# items 5, 6 and 7: run's generated inputs, onnxruntime's whole message, --shape names


def reflect_pad() -> onnx.ModelProto:
    """silero-vad's trouble in small: reflect padding of 40 needs more than 32 samples."""
    pads = numpy_helper.from_array(np.array([0, 40, 0, 40], np.int64), "pads")
    return builders.model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
                          [builders.vi("x", shape=[1, "n"])], [builders.vi("y", shape=[1, None])], [pads], opset=18)


def test_run_generates_inputs_that_run_as_compare_does(save):
    src = save(reflect_pad(), "pad.onnx")
    assert invoke("compare", src, src).exit_code == 0
    r = invoke("run", src)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("y: float32[1, 592]")


def fixed_image() -> onnx.ModelProto:
    return builders.model([helper.make_node("Relu", ["x"], ["y"])], [builders.vi("x", shape=[1, 3, 224, 224])],
                          [builders.vi("y", shape=[1, 3, 224, 224])])


def test_onnxruntimes_message_keeps_what_to_change(save):
    r = invoke("run", save(fixed_image(), "img.onnx"), "--shape", "x:1x3x48x192")
    one_error_line(r, "for the following indices", "index: 2 Got: 48 Expected: 224")


def test_an_unknown_shape_name_is_refused_listing_the_inputs(tmp_path, save):
    src = save(fixed_image(), "img.onnx")
    one_error_line(invoke("run", src, "--shape", "z:1x3x48x192"), "--shape z", "x[1, 3, 224, 224]")
    q = save(builders.quant_cases(), "q.onnx")
    r = invoke("quant", q, tmp_path / "o.onnx", "--shape", "idz:2")
    one_error_line(r, "--shape idz", "ids[2]")
    assert not (tmp_path / "o.onnx").exists()
    one_error_line(invoke("compare", q, q, "--shape", "idz:2"), "--shape idz")


# item 14: print(report) is what the CLI prints


def test_printing_a_report_gives_the_clis_lines_not_the_dataclass(tmp_path, save):
    import onnxsurgery

    src = save(builders.duplicate_initializers(), "d.onnx")
    model, report = onnxsurgery.shrink(src)
    text = str(report)
    assert text.startswith(f"{src} -> ") and "merged 2 constants" in text
    assert len(text) < 1000 and "PassReport(" not in text
    written = onnxsurgery.quant_file(save(builders.quant_cases(), "q.onnx"), tmp_path / "q8.onnx")
    text = str(written)
    assert "quantized 4 weights" in text and "verification" in text and len(text) < 2000
    assert "RunReport(" in repr(written)  # the details stay where they were
    assert str(report.pass_report("merge_duplicates")).startswith("merge_duplicates: 2 changed")


# item 10: a block size that does not divide an axis is said, not silently changed


def test_a_block_size_that_does_not_divide_is_said(tmp_path, save):
    src = save(builders.quant_cases(), "q.onnx")
    r = invoke("quant", src, "--dry-run", "--block-size", "7", "--granularity", "block")
    assert r.exit_code == 0, r.output
    assert "--block-size 7 does not divide" in r.output and "blocks of 4 for" in r.output
    r = invoke("quant", src, tmp_path / "b.onnx", "--block-size", "7", "--granularity", "block")
    assert r.exit_code == 0 and "blocks of 4 for" in r.output, r.output
    r = invoke("quant", src, tmp_path / "b.onnx", "--block-size", "16", "--granularity", "block")
    assert r.exit_code == 0 and "--block-size 16" not in r.output, r.output  # 16 divides 64: nothing to say
    # the API says it too: the note is the plan's, not the CLI's
    plan = onnxsurgery.quant_plan(src, block_size=7, granularity="block")
    assert any("--block-size 7 does not divide" in n for n in plan.notes)
    written = onnxsurgery.quant_file(src, tmp_path / "b.onnx", block_size=7, granularity="block", verify=False)
    assert any("blocks of 4 for" in n for n in written.notes)


# item 12: latency noise is not coloured as a regression


def test_the_report_measures_its_latency_noise_and_leaves_it_uncoloured(tmp_path, save, monkeypatch):
    """A loaded machine: the original's runs at the end take 25% longer than at the start. The
    band a latency ratio must leave to be coloured covers that."""
    from onnxsurgery import evaluate
    from onnxsurgery.html_report import report_file

    real, calls = evaluate._latencies, []

    def loaded(sess, path, feeds, warm=False):
        # the runs happen; their times are fixed, so that this machine's own noise (a CI box
        # under load measured 0.14 where 0.25 was put in) neither hides nor adds to the 25%
        times = [1e-3] * len(real(sess, path, feeds, warm))
        calls.append(path)
        slower = 1.25 if len(calls) > 2 else 1.0  # the original's runs at the end (after each method's)
        return [t * slower for t in times]

    monkeypatch.setattr(evaluate, "_latencies", loaded)
    src = save(builders.duplicate_initializers(), "d.onnx")
    data = report_file(src, tmp_path / "r.html", methods=("shrink",))
    original, shrink = data["methods"]
    assert original["latency_noise"] >= 0.2 and shrink["latency_noise"] >= original["latency_noise"]
    assert 0 < original["latency_min_ms"] <= original["latency_ms"]
    page = (tmp_path / "r.html").read_text()
    assert "row.latency_noise" in page and "left uncoloured" in page


# item 11: a checkout beside a script shadows the package; the docs say where else to put it


def test_the_docs_suggest_no_checkout_that_shadows_the_package(tmp_path):
    """The examples' README suggested `~/onnxsurgery`, from where `cd ~ && python api.py`
    imports the checkout as an empty namespace package. It suggests another place now and says
    what the symptom means. (A root __init__.py that says so itself is not an option: pytest
    would import the checkout root as the package `onnxsurgery` when run there.)"""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "examples" / "README.md").read_text()
    assert "~/onnxsurgery/" not in text and "~/src/onnxsurgery" in text
    assert "has no attribute 'shrink'" in text
    assert not (root / "__init__.py").exists()


def test_compare_and_quant_keep_onnxruntimes_whole_message_too(tmp_path, save):
    """verify.py keeps onnxruntime's whole message on one line (runtime_message), tail included,
    for the CLI and for Python callers alike."""
    src = save(fixed_image(), "img.onnx")
    r = invoke("compare", src, src, "--shape", "x:1x3x48x192")
    one_error_line(r, "for the following indices", "index: 2 Got: 48 Expected: 224")
    with pytest.raises(onnxsurgery.OnnxSurgeryError, match="index: 2 Got: 48 Expected: 224"):
        onnxsurgery.compare(src, src, shapes={"x": [1, 3, 48, 192]})
