"""Whether the choices measured on --inputs hold on samples they were not tuned on (issue 55).

A plan measured on a few samples can fit their rounding: errors that cancel on those samples
and add up on others. tumor_vgg16 (a VGG16, 4 tune phantoms): its measured decisions together
gave 0.046 on the tune phantoms against the data-free plan's 0.091, and 0.121 on 24 held-out
ones against 0.081 (worse on 23). No per-weight rule told this apart from nudenet, where the
measured float16 picks help on any image: only the whole model's output on other samples does.

So the samples are split in two folds (even and odd positions), the choices are measured on
each fold, and each fold's plan is built and run in onnxruntime on the other fold, beside the
data-free plan run on both. The measured choices (made on all the samples) are adopted only
where their held-out error is below the data-free plan's (the product of the two halves'
ratios below 1: a geometric mean, which no one hard sample decides); otherwise
the plan is the data-free one, and the note says so with the figures. The folds' own captures
keep the original's outputs (calibration.py, `reference_outputs`): each fold is the other's
reference at no run of its own. Each candidate is written to a temporary file and run from
there, one session at a time, so the guard holds no float copy of the weights beside
what a `quant` run holds anyway.
"""

from __future__ import annotations

import ctypes
import logging
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import OnnxSurgeryError
from ..pipeline import dry_run_pipeline, open_workspace, quant_pipeline
from ..quantization.calibration import CHOICE_ROWS, Calibration, choice_samples
from ..quantization.plan import Plan
from ..quantization.options import QuantOptions
from ..report import RunReport
from ..run_options import Inputs
from ..running.verify import compare_models
from ..storage.staging import save_model
from .quant_steps import at_required_opset, needed_opset

log = logging.getLogger("onnxsurgery")

# What a weight's form is: records that agree on these build the same weight (`why` aside)
FORM = ("dtype", "granularity", "axis", "symmetric", "lowering", "block_size", "rounding", "levels", "keep_quantized")


@dataclass
class HeldOut:
    """The guard's finding: whether the measured choices hold, and the figures that said so."""

    adopted: bool
    measured: float | None  # held-out error of the folds' measured plans, mean over the folds
    data_free: float | None  # the data-free plan's on the same samples
    note: str
    # the original's outputs on every sample (names, each sample's), from the halves' captures:
    # verification's reference where the data-free plan is kept (no capture of all samples runs then)
    reference: tuple[list[str], list[list]] | None = field(default=None, repr=False)


def folds(samples: list) -> list[tuple[list, list]]:
    """(tune, test) pairs: the even and the odd positions, each tuned on and tested on the other."""
    even, odd = samples[0::2], samples[1::2]
    return [(even, odd), (odd, even)] if even and odd else []


def check_measured(input_path, options: QuantOptions, inputs: Inputs, *, merge: bool = True) -> HeldOut:
    """Whether `options`' choices measured on `inputs.samples` hold on held-out samples (module
    docstring). Where the check cannot run (a sample onnxruntime refuses: the run's own
    verification says so in its words), the choices are the weights' alone."""
    try:
        return _check(input_path, options, inputs, merge)
    except OnnxSurgeryError as e:
        return HeldOut(False, None, None, "per-weight choices made from the weights alone: the measured ones could "
                                          f"not be checked on samples they were not tuned on ({e})")


def _check(input_path, options: QuantOptions, inputs: Inputs, merge: bool) -> HeldOut:
    samples = inputs.samples or []
    pairs = folds(samples)
    if not pairs:  # one batch of rows (calibration.choice_samples): measured on its rows, unchecked
        return HeldOut(True, None, None, (
            f"per-weight choices measured on the {choice_samples(samples)} rows of one sample from --inputs, not "
            "checked on samples they were not tuned on (give two samples or more: they are, in halves)"))
    # each half's choices read its share of the rows the whole would (CHOICE_ROWS): the two plans
    # together cost one measured plan's row products, not two
    plans, outputs = [], []
    for tune, _ in pairs:
        capture = Calibration(input_path, tune, shapes=inputs.shapes, folds=1, rows=CHOICE_ROWS // len(pairs))
        plans.append(_plan(input_path, options, merge, capture))
        # only its outputs kept: a capture's readers hold the planned graph, weights and all
        outputs.append(capture.reference_outputs(capture.samples))
        del capture
    free = _plan(input_path, options, merge, None)
    differ = [sum(_forms(plan).get(name) != form for name, form in _forms(free).items()) for plan in plans]
    if not any(differ):  # nothing of theirs to check: what the halves agree on is the data-free plan
        return HeldOut(False, None, None,
                       f"per-weight choices made from the weights alone: measured on each half of the {len(samples)} "
                       f"samples from --inputs, they chose the data-free plan's forms", _in_order(outputs, samples))
    found = []  # (measured, data-free) per half
    with tempfile.TemporaryDirectory(prefix="onnxsurgery-held-out-") as tmp:
        free_model = _build(input_path, options, merge, free, Path(tmp) / "data_free.onnx")
        for index, (_, test) in enumerate(pairs):
            reference = outputs[1 - index]  # the test half is the other's tune set: its capture ran the original
            free_error = _error(input_path, free_model, test, inputs, reference)
            fold_error = free_error
            if differ[index]:
                fold_model = _build(input_path, options, merge, plans[index], Path(tmp) / "half.onnx")
                fold_error = _error(input_path, fold_model, test, inputs, reference)
            log.info("held out, half %d: measured %.4g, data-free %.4g (%d weights differ)", index, fold_error,
                     free_error, differ[index])
            found.append((fold_error, free_error))
    measured_error, data_free_error = (sum(f[i] for f in found) / len(found) for i in (0, 1))
    figures = (f"held-out error {', '.join(f'{m:.3g}' for m, _ in found)} measured against "
               f"{', '.join(f'{f:.3g}' for _, f in found)} data-free on the {len(found)} halves of {len(samples)} "
               f"samples")
    # by the ratio on each half, not by the sum of the errors: one hard sample (a phantom the
    # data-free plan rounds badly: 0.091, against 0.015 on the other half) would outweigh a loss
    # of 3x on the other half. Nor on every half: nudenet's measured plan won 0.72x on one half
    # and lost 1.21x on the other, and wins on its report images (0.0024 against 0.0033).
    reference = _in_order(outputs, samples)
    if math.prod(_ratio(m, f) for m, f in found) < 1.0:
        return HeldOut(True, measured_error, data_free_error,
                       f"per-weight choices measured on {len(samples)} samples from --inputs: they hold on samples "
                       f"they were not tuned on ({figures})")
    return HeldOut(False, measured_error, data_free_error,
                   f"per-weight choices made from the weights alone: the ones measured on --inputs did not hold on "
                   f"samples they were not tuned on ({figures})", reference)


def holds(found: list[tuple[float, float]]) -> bool:
    """Whether the measured plans' held-out errors beat the data-free plan's, given (measured,
    data-free) per half: by the product of the halves' ratios, not by the sum of the errors. One
    hard sample (a phantom the data-free plan rounds badly: 0.091, against 0.015 on the other
    half) would outweigh a loss of 3x on the other half. Nor on every half: nudenet's measured
    plan won 0.72x on one half and lost 1.21x on the other, and wins on its report images
    (0.0024 against 0.0033)."""
    return math.prod(_ratio(m, f) for m, f in found) < 1.0


def _give_back() -> None:
    """The heap's free pages back to the system (glibc's malloc_trim, as verification does): a
    plan's graph and weights, freed, stay in the heap and the next plan's come on top of them."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


def _in_order(found: list, samples: list) -> tuple[list[str], list[list]] | None:
    """The original's outputs on `samples` in their order, from the even and odd halves' captures."""
    if not all(found) or found[0][0] != found[1][0]:
        return None
    return found[0][0], [found[i % 2][1][i // 2] for i in range(len(samples))]


def _ratio(measured: float, data_free: float) -> float:
    if data_free > 0:
        return measured / data_free
    return 1.0 if measured == 0 else math.inf


def _plan(input_path, options: QuantOptions, merge: bool, activations: Calibration | None) -> Plan:
    """The plan `quant --dry-run` makes with choices measured on `activations` (None: data-free)."""
    ws = open_workspace(input_path)
    try:
        opset = max(ws.opsets.get("", 1), needed_opset(ws, options))
        steps = quant_pipeline(options, merge=merge, opsets={**ws.opsets, "": opset}, activations=activations)
        return dry_run_pipeline(ws.graph, steps, overridable=ws.overridable)
    finally:
        ws.close()
        _give_back()  # the plan's graph and weights, before the next plan's come on top


def _forms(plan: Plan) -> dict[str, tuple]:
    return {w.name: tuple(getattr(w, k, None) for k in FORM) for w in plan.weights}


def _build(input_path, options: QuantOptions, merge: bool, plan: Plan, path: Path) -> Path:
    """`plan` applied as `quant` applies a budget's plan, written to `path`."""
    ws = open_workspace(input_path)
    report = RunReport("quant", str(input_path), bytes_before=ws.input_bytes)
    try:
        ws = at_required_opset(ws, input_path, options, report, verify=False, records=plan)
        ws.run_pipeline(quant_pipeline(options, merge=merge, opsets=ws.opsets, records=plan, store=ws.store))
        save_model(ws.finish(), path, external_data=ws.has_external_data_files, files=ws.files)
    finally:
        ws.close()
        _give_back()
    return path


def _error(input_path, candidate: Path, samples: list, inputs: Inputs, reference) -> float:
    """The candidate's relative L2 output error on `samples` (worst over them and the outputs,
    as verification reports it)."""
    found = compare_models(input_path, candidate, samples=samples, shapes=inputs.shapes, fold_candidate=False,
                           outputs=inputs.outputs, reference_outputs=reference)
    return found["rel_l2_error"]
