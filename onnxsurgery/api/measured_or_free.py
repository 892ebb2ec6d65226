"""With --inputs: the plan measured on the samples, or the data-free one, whichever is more
accurate on the samples by their median error (issue 55).

A plan measured on a few samples can fit them: tumor_vgg16 (a VGG16, 4 tune phantoms) measured
three weights' forms otherwise than the data-free plan, which cut its worst phantom's error
0.0909 -> 0.044 and raised two others 0.0119 -> 0.0457 and 0.0146 -> 0.0377; on 4 other
phantoms 0.0815 -> 0.123. No per-weight figure tells that apart from the models where the
measured plan helps on any input; the whole model's output on each sample does.

So both plans are made (the measured one once: it is then applied as made, not planned again),
and where their forms differ both are built and run on the samples, and the measured plan is
kept where its median error over the samples is below the data-free plan's. Why the median:
- Each sample's figure is a held-out one where the plan does not change without that sample
  (leave-one-out): planned on any 3 of tumor's 4 phantoms (or PP-OCRv6 rec's 4 lines), the
  choices are those made on all 4, so its samples' errors are what leave-one-out would judge,
  at one plan instead of four. Where a choice does hang on one sample, this judge favours the
  measured plan (it fitted that sample too); it is not checked, which would cost n plannings.
- Not the worst sample: the measured plan fits the worst one (tumor's phantom 0, above), and a
  new sample meets the typical error more often than that one's.
- Not the product of the per-sample ratios (measured3's rule on halves): a sample whose error is
  tiny either way decides it by noise. PP-OCRv6 rec's measured plan raised one line 0.00103 ->
  0.00398 (3.9x) while it cut the two hard ones 0.0614 -> 0.0498 and 0.0578 -> 0.0399; on other
  lines it is the better plan (0.0198 against 0.0229). Medians: tumor 0.0409 measured against
  0.0214 data-free, rec 0.0220 against 0.0302.
Cost: the data-free plan (its measures are in the weights alone), two builds and the two
models' runs on the samples; the original's outputs are the measured choices' capture's
(calibration.py, `reference_outputs`). Each candidate is written to a temporary file and run
from there, one session at a time. The kept one is the run's result (issue 55, measured5): quant
writes its file as it is, with its build's reports, instead of building the plan again (where
no opset upgrade was made), and verification takes its outputs on the samples instead of
running them again (where they were computed as it computes them: one sample at a time,
unfolded; a batched capture's samples run again). `--inputs`' CPU time against before this
check (median user+sys of 3-4 alternating runs): tumor_vgg16 1.53x (1.96x without the reuse),
nudenet 1.44x (1.70x), PP-OCRv6 det 1.23x (1.72x), multilingual-e5 1.83x (1.91x: batched).
Where the model is small (CONCURRENT_BYTES on disk: the zoo's detectors and classifiers, not
multilingual-e5), the data-free plan is made on a second thread while the measured one is
(its measures run one weight at a time on one core), and the data-free candidate is built and
run on it while the measured one is: the check's cost moves onto the other core of two, at the
price of a second workspace held at the same time (ddddocr_det: peak 272-276 -> 292-296 MB).
The same plans, files and errors as one after the other (issue 58, measured6). The measured
plan itself (issue 58, measured7): its choices measure two weights at a time as the data-free
plan's do (calibration.py's moments take a lock), its capture's session sleeps between
operators instead of spinning on the core the data-free plan needs, and a folded-only candidate
(folded_only.py) runs folded at once instead of after a failed unfolded session. Since measured11
(issue 58) the two candidates' shared prefix runs once: the measured one runs whole, asked also
for the values where the data-free one starts to differ, and the data-free one runs from there
(shared_prefix.py; a single file up to CONCURRENT_BYTES, no subgraphs). Both candidates' outputs
came out bit-identical to their whole runs on capspot_siamese and crepe_tiny (the same plans,
files and reports); median CPU of 3 alternating pairs 14.4 -> 11.1 s and 3.28 -> 2.44 s. Not so
by construction (a cut can keep onnxruntime from a fusion across it), so the kept one's pieced
outputs reach verification only after its file, run whole on the first sample, gave them bit for
bit (`Built.confirm`). Since measured14 (issue 58) the two plans and builds round a weight one
way once (quantization/shared_rounding.py; up to CONCURRENT_BYTES): ddddocr_det's roundings 1.46 ->
0.54 s of CPU, the same files. Since inputs9 (issue 58) the losing candidate's runs stop once the
samples not yet run cannot change the choice (median_race.py: the note's figures for it are then
bounds), and a dry run drops the kept outputs instead of confirming them. Since inputs10 a kept
candidate whose opset upgrade changed only the version stamp (or moved axes) is written as built,
not built again by the run (`_build`). Since inputs12 the data-free plan is kept on the first 2
samples alone where it errs within 1.5% of the measured one there, or less (median_race.py), and
the shared prefix's runs take those samples in turn so that the measured file stops there too
(shared_runs.py). Since inputs15 the first sample alone keeps it where the data-free plan errs at
least 10% less there (median_race.CLEAR): the measured file runs once (isbnx_det, ppocr_v4_seal_det).
"""

from __future__ import annotations

import logging
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnsupportedModelError
from ..folded_only import resizes_constants_cubically
from ..opset import upgrade_opset
from ..pipeline import dry_run_pipeline, open_workspace, quant_pipeline
from ..quantization.calibration import Calibration
from ..quantization.options import QuantOptions
from ..quantization.plan import Plan
from ..quantization.shared_rounding import sharing
from ..report import RunReport
from ..run_options import Inputs
from ..running import heap
from ..running.ahead import Pending
from ..running.output_errors import compare_outputs
from ..running.output_kinds import headline_outputs
from ..running.ranked import ranked_outputs
from ..running.sessions import session
from ..storage.io import open_model
from ..storage.lazy import read_model_skipping_weights
from ..storage.staging import save_model
from .quant_steps import at_required_opset, needed_opset
from .built import Built, candidate_runs, digest, same_build  # noqa: F401 - same_build: quantizing.py imports it here
from .median_race import CLEAR, CLOSE, FIRST, Race, bound_text, clear_on_first, close_on_first, decided
from .shared_runs import shared_runs

log = logging.getLogger("onnxsurgery")

# Models up to this size on disk make the data-free plan and candidate on a second thread (the
# other core) beside the measured ones (module doc, Cost)
CONCURRENT_BYTES = 128 << 20
# What the roundings shared by the two plans and builds may hold (quantization/shared_rounding.py)
SHARED_ROUNDING_BYTES = 256 << 20
# What a weight's form is: records that agree on these build the same weight (`why` aside)
FORM = ("dtype", "granularity", "axis", "symmetric", "lowering", "block_size", "rounding", "levels", "keep_quantized")


@dataclass
class Chosen:
    """The plan to apply (the measured one, or the data-free one) and the note saying which and why
    (None: the measured plan, which the data-free one agrees with or was not checked against)."""

    plan: Plan | None  # None: planned in the pipeline as before (an opset upgrade that may fail: module doc)
    measured: bool
    note: str | None = None
    errors: tuple[list[float], list[float]] | None = None  # per sample: measured plan's, data-free plan's
    built: Built | None = None  # the kept plan's build: its file's digest and its outputs on the samples


def measured_or_free(input_path, options: QuantOptions, inputs: Inputs, activations: Calibration,
                     *, merge: bool = True, confirm: bool = True) -> Chosen:
    """The plan `options` make with the choices measured on `activations` (the user's samples),
    or the data-free plan where that one's median error over the samples is lower (module doc).
    `confirm` False (--dry-run: nothing is verified): the kept candidate's pieced outputs are
    dropped instead of confirmed by a whole run (Built.confirm)."""
    if options.include:  # weights --include forces past a refusal: a plan's records cannot ask for that
        return Chosen(None, True)
    if not _concurrent(input_path):
        return _chosen(input_path, options, inputs, activations, merge, False, confirm)
    with sharing(SHARED_ROUNDING_BYTES):  # the two plans and builds round a weight the same way once
        return _chosen(input_path, options, inputs, activations, merge, True, confirm)


def _chosen(input_path, options: QuantOptions, inputs: Inputs, activations: Calibration, merge: bool,
            concurrent: bool, confirm: bool = True) -> Chosen:
    # the data-free plan on a second thread while the measured one is made (module doc, Cost)
    beside = Pending(lambda: plan_with(input_path, options, merge, None)) if concurrent else None
    try:
        measured, upgrade = plan_with(input_path, options, merge, activations)
    except BaseException:
        if beside is not None:
            beside.wait()
        raise
    if upgrade is not None and not _upgrades(input_path, upgrade):
        # the pipeline falls back to the model's own opset where the converter fails (at_required_opset);
        # a plan made at the newer one would be refused there
        if beside is not None:
            beside.wait()
        return Chosen(None, True)
    try:
        free, _ = beside.result() if beside is not None else plan_with(input_path, options, merge, None)
        differ = differing(measured, free)
        if not differ:
            return Chosen(measured, True)
        free = _marked(free, differ)  # before its build: the build's reports are the run's (quantizing.py)
        errors, builds = _errors(input_path, options, merge, (measured, free), inputs, activations,
                                 concurrent=beside is not None, confirm=confirm)
    except Exception as e:  # noqa: BLE001 - a candidate that does not build or run: planned in the pipeline,
        log.info("measured plan not checked against the data-free one: %s", e)  # as before, its errors its own
        return Chosen(None, True)
    n = max(len(e) for e in errors)  # the kept one's runs are all made (median_race.py)
    log.info("candidates' errors per sample: measured %s, data-free %s", *([f"{x:.6g}" for x in e] for e in errors))
    keep = decided(*errors, n)
    mine, theirs = (bound_text(e, n, statistics.median) for e in errors)
    what = (f"{len(differ)} weight{'s' * (len(differ) != 1)} measured otherwise than from the weights alone; "
            f"median relative L2 over the {n} samples {mine} measured, {theirs} data-free")
    for build in builds[keep:keep + 1]:  # the one not kept: its file goes
        if build is not None:
            build.discard()
    kept = builds[0] if keep else builds[1]
    if kept is not None:
        if confirm:
            kept.confirm()
        elif kept.pieced is not None:  # not confirmed: not to be taken as verification's
            kept.outputs = None
        if kept.reports is None:  # the run builds it again (an opset upgrade): its digest is what is kept
            kept.discard()
    if keep:
        note = f"per-weight choices measured on {n} samples from --inputs ({what})"
        return Chosen(measured, True, note, errors, builds[0])
    if clear_on_first(*errors, n):  # decided on the first sample (median_race.py)
        note = (f"per-weight choices made from the weights alone: on the first of the {n} samples from --inputs "
                f"the data-free plan erred {errors[1][0]:.3g} against {errors[0][0]:.3g} for the plan measured on "
                f"them, {CLEAR:.0%} or more below, so the measured one was not run further ({what})")
        return Chosen(free, False, note, errors, builds[1])
    if close_on_first(*errors, n):  # decided on the first samples (median_race.py)
        firsts = ", ".join(f"{f:.3g} against {m:.3g}" for m, f in zip(errors[0][:FIRST], errors[1][:FIRST]))
        note = (f"per-weight choices made from the weights alone: on the first {FIRST} of the {n} samples from "
                f"--inputs the data-free plan erred within {CLOSE:.1%} of the plan measured on them, or less "
                f"({firsts}), so the measured one was not run further ({what})")
        return Chosen(free, False, note, errors, builds[1])
    note = (f"per-weight choices made from the weights alone: the plan measured on the {n} samples from --inputs "
            f"was no more accurate on them ({what}; worst {bound_text(errors[0], n, max)} against "
            f"{bound_text(errors[1], n, max)})")
    return Chosen(free, False, note, errors, builds[1])


def keeps_measured(measured: list[float], data_free: list[float]) -> bool:
    """Whether the measured plan is kept, given each plan's error on each sample: by the median
    (module doc); a tie keeps the plan that was not fitted to the samples, and so does a data-free
    plan within median_race.CLOSE of the measured one on each of the first samples, or CLEAR below it
    on the first (median_race.py)."""
    if clear_on_first(measured, data_free, len(measured)) or close_on_first(measured, data_free, len(measured)):
        return False
    return statistics.median(measured) < statistics.median(data_free)


def differing(a: Plan, b: Plan) -> list[str]:
    """The weights whose forms differ between the two plans, or whose 4-bit values do: a 4-bit
    weight whose clipping search one plan weighs by the samples' importance (Plan.importance,
    quantize.quantize_args) is rounded otherwise in the same form. lore_process (an opset-9
    transformer) `--dtype int4 --inputs`: every form agreed, so the weighted clips were kept unjudged,
    and they erred 0.0719 on the tune set (0.0698 on the report set) against the data-free plan's
    0.0397 (0.0417); judged, the data-free plan is kept (issue 58, inputs18)."""
    fa, fb, wa, wb = _forms(a), _forms(b), _weighted(a), _weighted(b)
    return [name for name, form in fb.items() if fa.get(name) != form or (name in wa) != (name in wb)]


def plan_with(input_path, options: QuantOptions, merge: bool,
              activations: Calibration | None) -> tuple[Plan, int | None]:
    """The plan `quant --dry-run` makes, its choices measured on `activations` (None: data-free),
    and the opset it was made at where the model's is older (None: the model's)."""
    ws = open_workspace(input_path)
    try:
        opset = max(ws.opsets.get("", 1), needed_opset(ws, options))
        steps = quant_pipeline(options, merge=merge, opsets={**ws.opsets, "": opset}, activations=activations)
        plan = dry_run_pipeline(ws.graph, steps, overridable=ws.overridable)
        return plan, (opset if opset > ws.opsets.get("", 1) and ws.template is not None else None)
    finally:
        ws.close()
        heap.give_back_freed_memory()


def _upgrades(input_path, opset: int) -> bool:
    """Whether onnx's converter takes the model to `opset` (its graph, the payloads left in the file)."""
    model, files, _ = open_model(input_path)
    try:
        upgrade_opset(model, opset)
        return True
    except UnsupportedModelError:
        return False
    finally:
        files.close()


def _marked(plan: Plan, differ: list[str]) -> Plan:
    """`plan` with the weights it decides otherwise than the measured plan saying so in `why`."""
    names = set(differ)
    for record in plan.weights:
        if record.name in names:
            record.why = f"{record.why} (kept over the form measured on --inputs: see the notes)"
    return plan


def _weighted(plan: Plan) -> set[str]:
    """The plan's 4-bit weights rounded with the samples' importance (quantize_args)."""
    return {w.name for w in plan.weights if w.dtype in ("int4", "uint4") and plan.importance.get(w.name) is not None}


def _forms(plan: Plan) -> dict[str, tuple]:
    return {w.name: tuple(getattr(w, k, None) for k in FORM) for w in plan.weights}


def _errors(input_path, options, merge, plans, inputs: Inputs, activations: Calibration, *, concurrent: bool = False,
            confirm: bool = True):
    """Each plan's relative L2 error on each sample (the largest over the headline outputs, as
    verification reports a sample's), and each plan's Built (None: not reusable: a folded run, or
    a file with external data). `concurrent`: the second plan built and run on a thread of its own
    beside the first (module doc, Cost)."""
    feeds = activations.runnable_samples()
    reference = activations.reference_outputs(activations.samples)
    if reference is None:  # a sample that lacks an input (generated in the capture): the original runs here
        sess = session(input_path, layout=True)
        names = [o.name for o in sess.get_outputs()]
        reference = names, [sess.run(names, f) for f in feeds]
        del sess
    names, expected = reference
    headline = headline_outputs(names, inputs.outputs)
    structure = read_model_skipping_weights(Path(input_path))
    ranked = ranked_outputs(structure)
    folded = resizes_constants_cubically(structure)  # runs folded only: no unfolded session that fails first

    def build(plan: Plan, made: list) -> Path:
        """`plan` built into a folder of its own; its Built in `made`."""
        tmp = Path(tempfile.mkdtemp(prefix="onnxsurgery-measured-"))
        built = Built("", [], tmp / "candidate.onnx")  # its folder goes with it (discard)
        made.append(built)
        path, built.reports, built.notes = _build(input_path, options, merge, plan, built.path)
        return path

    def scored(outputs: list[list], errors: list[float]) -> list[float]:
        """`errors` (of the first outputs) with those of the rest of `outputs` (a restart: fewer)."""
        del errors[len(outputs):]
        for got, ref in zip(outputs[len(errors):], expected[len(errors):]):
            compared = compare_outputs(ref, got, names, ranked)
            errors.append(max((compared[n]["rel_l2_error"] for n in headline), default=0.0))
        return errors

    def judged(path: Path, made: list, outputs: list[list], unfolded: bool,
               errors: list[float] | None = None) -> list[float]:
        """The candidate's errors on the samples run; its Built kept (its outputs) or let go."""
        built, errors = made[-1], scored(outputs, [] if errors is None else errors)
        heap.give_back_freed_memory()
        alone = [p.name for p in path.parent.iterdir()] == [path.name]  # no data file beside it
        if unfolded and alone:
            built.outputs = outputs  # verification takes them where it would run them alike (verify.py)
            if built.reports is None:  # built again by the run: its bytes tell whether it is this one
                built.digest = digest(path)  # the file goes once confirmed (measured_or_free)
        else:
            built.discard()
            made[-1] = None
        return errors

    def whole(path: Path, race: Race, side: int) -> tuple[list[list], bool, list[float]]:
        """The candidate's outputs on the samples `race` still wants (median_race.py), whether
        they ran unfolded, and their errors."""
        errors: list[float] = []
        try:
            outputs, unfolded = candidate_runs(path, names, feeds, folded,
                                               lambda outputs: race.wants(side, scored(outputs, errors)))
        finally:
            race.stop(side)
        return outputs, unfolded, scored(outputs, errors)

    mine, theirs, beside = [], [], None
    try:  # both built (the second beside the first), then the second run only where it differs (shared_prefix.py)
        beside = Pending(lambda: build(plans[1], theirs)) if concurrent else None
        paths = [build(plans[0], mine)]
        paths.append(beside.result() if beside is not None else build(plans[1], theirs))
        found = None if folded else shared_runs(paths, names, feeds, (judged, scored), (mine, theirs),
                                                CONCURRENT_BYTES, confirm)
        if found is None:  # each run whole, the second beside the first, till the choice is made
            race = Race(len(feeds), lockstep=concurrent)
            beside = Pending(lambda: whole(paths[1], race, 1)) if concurrent else None
            runs = [whole(paths[0], race, 0)]
            runs.append(beside.result() if beside is not None else whole(paths[1], race, 1))
            keep = decided(runs[0][2], runs[1][2], len(feeds))
            for side, path in enumerate(paths):  # stopped on errors a folded restart then changed: all runs
                if len(runs[side][0]) < len(feeds) and keep is not (side == 1):
                    runs[side] = (*candidate_runs(path, names, feeds, folded), [])
            found = [judged(path, made, *ran) for path, made, ran in zip(paths, (mine, theirs), runs)]
    except BaseException:
        if beside is not None:
            beside.wait()
        for built in mine + theirs:
            if built is not None:
                built.discard()
        raise
    return (found[0], found[1]), [*mine, *theirs]


def _concurrent(input_path) -> bool:
    """Whether the data-free plan and candidate are made beside the measured ones: where the
    model's files are small enough that a second plan's and build's memory fits within the
    slack of docs/memory.md's bound (CONCURRENT_BYTES)."""
    _, files, size = open_model(input_path)  # the skim is the plans' too (storage/skim.py: kept for the call)
    files.close()
    return size <= CONCURRENT_BYTES


def _build(input_path, options: QuantOptions, merge: bool, plan: Plan,
           path: Path) -> tuple[Path, list | None, list[str]]:
    """`plan` applied as `quant` applies a budget's plan, written to `path`; with its passes'
    reports where nothing was warned and no upgrade left a check of its own (else None: not the
    run's), and the notes the upgrade wrote, as a verified run writes them. An upgrade that
    changed the version stamp alone, or only moved axes into Constant inputs, is checked by the
    result's verification only (quant_steps.at_required_opset): the run's build of the plan is
    then this one, made the same way (ppocr_v4_seal_det's and ddddocr_det's 11 -> 13, whose kept
    candidate the run built again before: issue 58, inputs10). Any other upgrade defers its
    check (`deferred`, never run here): built again by the run, as before."""
    ws = open_workspace(input_path)
    report = RunReport("quant", str(input_path), bytes_before=ws.input_bytes)
    deferred: list = []  # an upgrade's own check, never run here: its presence says "not stamp-only"
    try:
        ws = at_required_opset(ws, input_path, options, report, verify=True, records=plan, deferred=deferred)
        ws.run_pipeline(quant_pipeline(options, merge=merge, opsets=ws.opsets, records=plan, store=ws.store))
        save_model(ws.finish(), path, external_data=ws.has_external_data_files, files=ws.files)
        reports = ws.reports if not deferred and not report.warnings else None
    finally:
        ws.close()
        heap.give_back_freed_memory()
    return path, reports, list(report.notes)

