"""With --inputs, the measured plan is kept only where its median error over the samples is below
the data-free plan's (api/measured_or_free.py; issue 55, tumor_vgg16)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from conftest import run
from onnxsurgery.api.measured_or_free import differing, keeps_measured, measured_or_free, plan_with, same_build
from onnxsurgery.api.median_race import decided
from onnxsurgery.quantization.calibration import Calibration
from onnxsurgery.run_options import Inputs, QuantRun


def test_the_median_decides_not_the_worst_sample_nor_the_product_of_ratios():
    # tumor_vgg16's 4 tune phantoms: the measured plan cuts the worst one and raises two others
    # to its level; on other phantoms it lost (0.123 against 0.0815)
    tumor = [0.044, 0.0457, 0.0136, 0.0377], [0.0909, 0.0119, 0.0281, 0.0146]
    assert max(tumor[0]) < max(tumor[1]) and not keeps_measured(*tumor)
    # PP-OCRv6 rec's 4 lines: 3.9x on a line whose error is tiny either way (a product of the
    # ratios above 1), better on the hard ones; on other lines it won (0.0198 against 0.0229)
    rec = [0.0498, 0.00398, 0.0399, 0.00293], [0.0614, 0.00103, 0.0578, 0.00259]
    assert np.prod(np.divide(*rec)) > 1 and keeps_measured(*rec)
    assert not keeps_measured([0.01, 0.02, 0.03], [0.01, 0.02, 0.03])  # a tie: the plan not fitted to them


def _lossy_model() -> onnx.ModelProto:
    """test_lean_lowerings' model whose measured plan stores B as float16 (int8 in the data-free one)."""
    model = builders.outlier_model()
    model.graph.initializer.append(numpy_helper.from_array(builders.rand((256, 512), 3) * 0.05, "Wide"))
    model.graph.node.append(helper.make_node("MatMul", ["x", "Wide"], ["w"]))
    model.graph.output.append(builders.vi("w", shape=[2, 512]))
    return model


def test_plans_that_differ_are_judged_on_the_samples_and_the_kept_one_applied(tmp_path):
    model = _lossy_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    samples = [builders.feeds_for(model, seed) for seed in range(3)]
    inputs = Inputs(samples=samples)
    options = QuantRun.given(None, {"inputs": inputs, "min_elements": 1024}).options
    measured, _ = plan_with(src, options, True, Calibration.for_choices(src, samples))
    free, _ = plan_with(src, options, True, None)
    assert differing(measured, free) == ["B"]
    chosen = measured_or_free(src, options, inputs, Calibration.for_choices(src, samples))
    kept = chosen.built.path  # the kept plan's build: quant writes it instead of building the plan again
    assert kept.is_file() and same_build(chosen.built, kept)
    chosen.built.discard()
    assert chosen.built.path is None and not kept.parent.exists()
    mine, theirs = chosen.errors
    assert chosen.measured  # B in float16: closer to the float model on every sample
    # the kept plan's runs all made (verification's); the other's stopped once the choice was made
    assert len(mine) == 3 and len(theirs) == 2 and max(mine) < min(theirs)
    assert decided(mine, theirs, 3) and not decided(mine, theirs, 4)
    assert "1 weight measured otherwise" in chosen.note and "median relative L2" in chosen.note

    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024, samples=samples)
    records = {w["name"]: w for w in report.weights}
    assert records["B"]["dtype"] == "float16"
    assert chosen.note in report.notes
    # the file computes what the judged plan did: its worst error on the samples is the judge's
    worst = max(float(np.linalg.norm(b - a) / np.linalg.norm(a))
                for feeds in samples
                for a, b in zip(run(model, feeds), run(tmp_path / "q.onnx", feeds)))
    assert abs(worst - max(mine)) <= 1e-3 * max(mine) + 1e-6
    # the written file is the kept plan's build: its runs there are the verification's
    assert report.verification["rel_l2_error"] == max(mine) and report.verification["samples"] == 3


def test_a_stamp_only_upgrade_writes_the_kept_build_as_the_run_would_build_it(tmp_path, monkeypatch):
    """At an opset the plan upgrades where the converter changes only the version stamp (11 -> 13
    here, ppocr_v4_seal_det's and ddddocr_det's case), the kept candidate is written as built, with
    the upgrade's note (issue 58, inputs10): the same file and report as the run building it again
    (before: only its digest kept; its outputs, confirmed on its file, taken by verification)."""
    model = _lossy_model()
    model.opset_import[0].version = 11
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    samples = [builders.feeds_for(model, seed) for seed in range(3)]
    inputs = Inputs(samples=samples)
    options = QuantRun.given(None, {"inputs": inputs, "min_elements": 1024}).options
    chosen = measured_or_free(src, options, inputs, Calibration.for_choices(src, samples))
    built = chosen.built
    assert built.reports is not None and built.path.is_file() and not built.digest
    assert len(built.notes) == 1 and "opset 11 -> 13" in built.notes[0] and "only the version stamp" in built.notes[0]
    assert built.pieced is not None and built.outputs is not None and len(built.outputs) == 3
    built.discard()

    import onnxsurgery.api.measured_or_free as mof
    import onnxsurgery.api.quantizing as quantizing

    given, compare = [], quantizing.compare_models
    monkeypatch.setattr(quantizing, "compare_models",
                        lambda *a, **k: given.append(k["candidate_outputs"]) or compare(*a, **k))
    reused = onnxsurgery.quant_file(src, tmp_path / "reused.onnx", min_elements=1024, samples=samples)
    assert given and given[-1] is not None  # the kept runs are the verification's
    real_build = mof._build
    monkeypatch.setattr(mof, "_build", lambda *a: (*real_build(*a)[:1], None, []))  # as before: built again
    again = onnxsurgery.quant_file(src, tmp_path / "again.onnx", min_elements=1024, samples=samples)
    assert given[-1] is not None  # its digest matched the run's build
    assert (tmp_path / "reused.onnx").read_bytes() == (tmp_path / "again.onnx").read_bytes()
    a, b = reused.to_dict(), again.to_dict()
    assert a.pop("output") != b.pop("output") and a == b
    assert reused.verification["rel_l2_error"] == max(chosen.errors[0 if chosen.measured else 1])
    # nothing verified: the upgrade's note would say otherwise, so the run builds it again
    unverified = onnxsurgery.quant_file(src, tmp_path / "unverified.onnx", min_elements=1024, samples=samples,
                                        verify=False)
    assert (tmp_path / "unverified.onnx").read_bytes() == (tmp_path / "again.onnx").read_bytes()
    assert not any("verified with the result" in n for n in unverified.notes)


def test_a_dry_run_does_not_confirm_the_kept_outputs(tmp_path, monkeypatch):
    """--dry-run verifies nothing: the kept candidate's pieced outputs are not confirmed by a whole run."""
    model = _lossy_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    samples = [builders.feeds_for(model, seed) for seed in range(3)]
    from onnxsurgery.api.built import Built

    confirmed = []
    monkeypatch.setattr(Built, "confirm", lambda self: confirmed.append(self))
    plan = onnxsurgery.quant_plan(src, min_elements=1024, samples=samples)
    assert {w.name: w.dtype for w in plan.weights}["B"] == "float16" and not confirmed
    onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024, samples=samples)
    assert confirmed  # the real run does


def test_weights_clipped_by_the_samples_in_the_same_form_are_judged(tmp_path):
    # lore_process int4 --inputs: every form agreed with the data-free plan's, but the 4-bit
    # weights' clipping search was weighted by the samples (Plan.importance), so their values
    # differed; unjudged, they erred 0.07 against the data-free plan's 0.04 (issue 58, inputs18)
    weight = numpy_helper.from_array(builders.rand((256, 128), 5) * 0.05, "W")
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[2, 256])],
                           [builders.vi("y", shape=[2, 128])], [weight], opset=21, ir=10)
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    samples = [builders.feeds_for(model, seed) for seed in range(3)]
    inputs = Inputs(samples=samples)
    options = QuantRun.given(None, {"inputs": inputs, "dtype": "int4", "min_elements": 1024}).options
    measured, _ = plan_with(src, options, True, Calibration.for_choices(src, samples))
    free, _ = plan_with(src, options, True, None)
    assert [w.dtype for w in measured.weights] == ["int4"] and measured.importance and not free.importance
    assert differing(measured, free) == ["W"]
    measured.importance.clear()  # the same form, rounded the same way: nothing to judge
    assert differing(measured, free) == []
