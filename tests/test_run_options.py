"""The run's options in typed groups (run_options.py, issue 51): the API's flat keywords and the
groups given whole are one and the same run; a keyword is either a group's field or refused;
each declared flag is what `--help` lists and what `flags_of` writes back."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import builders
from onnxsurgery import api
from onnxsurgery.cli import main
from onnxsurgery.declare import flags_of
from onnxsurgery.errors import OptionError
from onnxsurgery.quantization.request import QuantRequest
from onnxsurgery.run_options import GROUPS, Budget, Decision, Inputs, Output, QuantRun, Verification


@pytest.fixture
def model_path(tmp_path):
    w = builders.rand((64, 64), 1)
    m = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[2, 64])],
                       [builders.vi("y", shape=[2, 64])], [numpy_helper.from_array(w, "W")])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    return path


def test_flat_keywords_go_to_their_groups():
    samples = [{"x": np.zeros((2, 64), np.float32)}]
    run = QuantRun.of(dtype="int4", samples=samples, max_error=0.2, in_place=True, target_size=10**6, merge=False)
    assert run.decision.request == QuantRequest(dtype="int4") and run.decision.merge is False
    assert run.inputs.samples is samples and run.verification.max_error == 0.2
    assert run.output.in_place and run.budget.target_size == 10**6
    whole = QuantRun.of(request=QuantRequest(dtype="int4"), inputs=Inputs(samples=samples),
                        verification=Verification(max_error=0.2), output=Output(in_place=True),
                        budget=Budget(target_size=10**6), decision=None, merge=False)
    assert whole == run


@pytest.mark.parametrize("keywords, words", [
    ({"sample": []}, "unknown quant option 'sample'"),
    ({"inputs": Inputs(), "shapes": {"x": [1]}}, "give inputs or its fields, not both (shapes)"),
    ({"request": QuantRequest(), "dtype": "int4"}, "give a request or its options, not both (dtype)"),
    ({"target_error": 0.1, "target_size": 10}, "--target-error or --target-size, not both"),
    ({"max_error": 0.1, "verify": False}, "--max-error needs the verification"),
    ({"dynamic": True, "dtype": "int4"}, "--dynamic runs onnxruntime's quantize_dynamic, which takes none of "
                                         "--dtype int4"),
    ({"plan": "p.json", "target_error": 0.1}, "--plan decides every weight; --target-error does not apply"),
    ({"fp16": True, "calibration": []}, "--fp16 stores no integers; --calibration does not apply"),
])
def test_a_contradiction_is_refused_in_one_place(keywords, words):
    with pytest.raises(OptionError, match=words.replace("(", r"\(").replace(")", r"\)")):
        QuantRun.of(**keywords)


@pytest.mark.parametrize("keywords, flag", [({"in_place": True}, "--in-place"), ({"verify": False}, "--no-verify"),
                                            ({"external_data": False}, "--one-file"),
                                            ({"outputs": ("y",)}, "--outputs")])
def test_a_dry_run_refuses_what_writes_or_verifies(keywords, flag):
    with pytest.raises(OptionError, match=f"--dry-run writes and verifies nothing; {flag} does not apply"):
        QuantRun.of(dry_run=True, **keywords)


def test_every_declared_flag_is_in_quant_help():
    text = CliRunner().invoke(main, ["quant", "--help"], terminal_width=80).output
    for group in (QuantRequest, *GROUPS.values()):
        for f in dataclasses.fields(group):
            flag = f.metadata.get("flag")
            if flag and not f.metadata.get("hidden"):
                assert flag.split("/")[0] in text, (group.__name__, flag)


def test_flags_of_writes_back_what_was_typed():
    assert flags_of(Verification(verify=False, max_error=0.5)) == ["--no-verify", "--max-error", "0.5"]
    assert flags_of(Output(external_data=False)) == ["--one-file"]
    assert flags_of(Decision(merge=False, dynamic=True)) == ["--dynamic", "--no-merge"]
    assert flags_of(Budget()) == [] and Budget(target_error=0.1).flag == "--target-error"


def test_plan_from_flat_keywords_equals_plan_from_the_run(model_path):
    flat = api.quant_plan(model_path, dtype="int4", min_elements=16)
    run = QuantRun(decision=Decision(request=QuantRequest(dtype="int4", min_elements=16)))
    assert api.quant_plan(model_path, run=run).to_dict() == flat.to_dict()
    with pytest.raises(OptionError, match="give run or its options, not both"):
        api.quant_plan(model_path, run=run, dtype="int8")


def test_the_cli_builds_the_same_run(model_path):
    r = CliRunner().invoke(main, ["-q", "quant", str(model_path), "--dry-run", "--json", "--dtype", "int4",
                                  "--min-elements", "16"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == api.quant_plan(model_path, dtype="int4", min_elements=16).to_dict()


def test_shrink_npy_and_embed_take_the_output_group(model_path, tmp_path):
    out = tmp_path / "s.onnx"
    report = api.shrink_file(model_path, out, output=Output(external_data=True))
    assert (tmp_path / "s.onnx.data").exists() and report.output == str(out)
    with pytest.raises(OptionError, match="give output or its fields, not both"):
        api.shrink_file(model_path, out, output=Output(), in_place=True)
    with pytest.raises(OptionError, match="unknown npy option 'inplace'"):
        api.npy_file(model_path, tmp_path / "n.onnx", inplace=True)
    with pytest.raises(OptionError, match="--inputs and --shape are what --verify runs on"):
        api.shrink_file(model_path, out, inputs=Inputs(shapes={"x": [2, 64]}))
