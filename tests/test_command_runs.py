"""One options object per command, validated once when it is constructed (issue 56): QuantRun
for quant_file, quant_plan and quant, ShrinkRun for shrink and shrink_file, NpyRun for npy_file;
each takes the object or its keywords, one or the other."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import builders
from onnxsurgery import api
from onnxsurgery.errors import OptionError
from onnxsurgery.quantization.options import QuantOptions, stays_float
from onnxsurgery.quantization.request import QuantRequest, where_it_runs
from onnxsurgery.run_options import Inputs, NpyRun, Output, QuantRun, ShrinkRun, Verification


@pytest.fixture
def model():
    w = builders.rand((64, 64), 1)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("MatMul", ["y", "W2"], ["z"])]
    return builders.model(nodes,
                          [builders.vi("x", shape=[2, 64])], [builders.vi("z", shape=[2, 64])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w.copy(), "W2")])


@pytest.fixture
def model_path(tmp_path, model):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path


def test_a_run_resolves_its_request_once_for_where_it_runs():
    run = QuantRun.of(dtype="int4", memory=10**9)
    assert isinstance(run.options, QuantOptions) and run.options == QuantRequest(dtype="int4").resolve(memory=10**9)
    web = QuantRun(verification=Verification(runtime="onnxruntime-web"))  # the hidden --runtime beside target any
    assert web.decision.request.target == "onnxruntime-web"  # said as --target onnxruntime-web
    assert (web.options.target, web.options.runtime, web.runtime) == ("any", "onnxruntime-web", "onnxruntime-web")
    assert where_it_runs("onnxruntime-web") == where_it_runs("any", "onnxruntime-web") == ("any", "onnxruntime-web")
    assert where_it_runs("onnxruntime", "onnxruntime-web") == ("onnxruntime", "onnxruntime-web")


def test_the_stays_float_rule_is_one_function_every_refusal_reads():
    assert stays_float(True, None) == "--fp16" and stays_float(False, 16) == "--levels 16"
    assert stays_float(False, None) is None and QuantRequest(levels=16).stays_float == "--levels 16"
    with pytest.raises(OptionError, match="--levels 16 stores no integers; --target-error does not apply"):
        QuantRun.of(levels=16, target_error=0.1)  # named as the request's refusals name it (it said --levels)
    with pytest.raises(OptionError, match="--levels 16 keeps weights in floating point; --dtype int4 does not apply"):
        QuantRun.of(levels=16, dtype="int4")
    with pytest.raises(OptionError, match="--fp16 keeps weights in floating point; --keep-quantized keeps integers"):
        QuantOptions(fp16=True, keep_quantized=True)


def test_quant_in_memory_takes_the_same_run_as_the_file_commands(model):
    by_keywords, _ = api.quant(model, dtype="int8", min_elements=16, merge=False)
    by_run, report = api.quant(model, run=QuantRun.of(dtype="int8", min_elements=16, merge=False))
    assert by_run.SerializeToString() == by_keywords.SerializeToString()
    assert report.pass_report("merge_duplicates") is None  # merge=False reached the pipeline
    old_form, _ = api.quant(model, request=QuantRequest(min_elements=16), merge=False)  # the README's form
    assert old_form.SerializeToString() == by_keywords.SerializeToString()
    with pytest.raises(OptionError, match="takes the request, merge and memory; --inputs is quant_file's"):
        api.quant(model, samples=[{"x": np.zeros((2, 64), np.float32)}])
    with pytest.raises(OptionError, match="give run or its options, not both"):
        api.quant(model, run=QuantRun(), dtype="int4")


def test_quant_plan_makes_a_given_run_a_dry_run(model_path):
    with pytest.raises(OptionError, match="--dry-run writes and verifies nothing; --in-place does not apply"):
        api.quant_plan(model_path, run=QuantRun(output=Output(in_place=True)))
    plan = api.quant_plan(model_path, run=QuantRun.of(min_elements=16))
    assert [w.name for w in plan.changed] == ["W"]  # W2 merged into W first


def test_shrink_takes_a_shrink_run_or_its_keywords(model, model_path, tmp_path):
    run = ShrinkRun.of(min_elements=1, verify=True, shapes={"x": [2, 64]}, external_data=False)
    assert run.inputs == Inputs(shapes={"x": [2, 64]}) and run.output == Output(external_data=False)
    by_run = api.shrink_file(model_path, tmp_path / "a.onnx", run=run)
    by_keywords = api.shrink_file(model_path, tmp_path / "b.onnx", min_elements=1, verify=True,
                                  inputs=Inputs(shapes={"x": [2, 64]}), external_data=False)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert by_run.verification["exact"] and by_keywords.passes[1].changed == 1
    with pytest.raises(OptionError, match="give run or its options, not both"):
        api.shrink_file(model_path, tmp_path / "c.onnx", run=run, verify=False)
    with pytest.raises(OptionError, match="unknown target 'trt'; choose tensorrt"):
        ShrinkRun(target="trt")  # before anything is read or written
    with pytest.raises(OptionError, match="unknown shrink option 'verfy'; the options are"):
        api.shrink_file(model_path, tmp_path / "c.onnx", verfy=True)
    with pytest.raises(OptionError, match="shrink in memory takes min_elements"):
        api.shrink(model, verify=True)
    result, report = api.shrink(model, run=ShrinkRun(min_elements=1))
    assert report.passes[1].changed == 1 and len(result.graph.initializer) == 1


def test_npy_takes_an_npy_run_or_its_keywords(model_path, tmp_path):
    with pytest.raises(OptionError, match="--shared is a selection of its own"):
        NpyRun(shared=True, names=("W",))
    assert NpyRun.of(names=["W*"], in_place=False).names == ("W*",)
    report = api.npy_file(model_path, tmp_path / "n.onnx", run=NpyRun(min_bytes=0))
    assert report.pass_report("externalize").changed == 1  # the merged weight, once
    with pytest.raises(OptionError, match="unknown npy option 'inplace'"):
        api.npy_file(model_path, tmp_path / "n.onnx", inplace=True)
