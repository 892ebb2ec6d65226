"""`quant`: weight-only quantization, in memory or from a file to a file (verified in
onnxruntime before anything is written), and its dry run, which shows the plan and writes
nothing. What the user asked is a QuantRequest (quantization/request.py), resolved once; the run's
other options come in groups (run_options.QuantRun), checked together there. Both the plan and
the real run start from one `prepare`."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from ..declare import flags_of
from ..errors import OptionError
from ..storage.staging import copy_file
from ..passes.constants_to_initializers import ConstantsToInitializers
from ..pipeline import Workspace, dry_run_pipeline, open_workspace, quant_pipeline, shrink_pipeline
from ..quantization.choices import allocation
from ..quantization.choices.planning import any_weight_to_change
from ..running.kv_cache import has_kv_cache
from ..quantization.calibration import Calibration
from ..quantization.options import QuantOptions
from ..quantization.plan import Plan, WeightPlan, read_plan
from ..quantization.request import QuantRequest
from ..run_options import PlanSource, QuantRun
from ..report import RunReport
from ..running.samples import check_samples
from ..running.readers import same_readers
from ..running.verify import compare_models, copy_verification, reference_ahead
from ._common import in_memory, write_checked, os_errors, output_for
from .budget import allocate, planning_options
from .check import check_for_tensorrt
from .verdict import judge, large_error_line
from .measured_or_free import Built, measured_or_free, same_build
from .quant_steps import (at_required_opset, block_size_note, decided_by, measured_activations, needed_opset,
                          run_quant_passes, run_quantize_dynamic)



def quant(model, *, run: QuantRun | None = None, **options) -> tuple[onnx.ModelProto, RunReport]:
    """Weight-only quantization in memory (no verification; see `quant_file`). It takes what
    `quant_file` and `quant_plan` take (a `run`, or its options as keywords: the fields of
    `QuantRequest`, `request=`, `merge=`, `memory=`), but for what needs files: a plan, a
    budget, calibration, inputs, verification and output."""
    run = QuantRun.given(run, options)
    decision = run.decision
    kept = dataclasses.replace(decision, request=QuantRequest(), merge=True, memory=None)
    beyond = flags_of(kept) + flags_of(run.budget) + flags_of(run.inputs) + flags_of(run.verification) \
        + flags_of(run.output)
    if beyond:
        raise OptionError(f"quant in memory takes the request, merge and memory; {beyond[0]} is quant_file's")
    quant_options = run.options
    result, report, _ = in_memory(
        model, "quant", lambda ws, report: run_quant_passes(ws, quant_options, decision.merge),
        prepare=lambda ws, report: at_required_opset(ws, model, quant_options, report, verify=False))
    _lift_plan(report)
    return result, report


@dataclass
class Preparation:
    """What a quant run decides before its first graph edit, the same for `quant_plan` and
    `quant_file`: the request resolved, a plan's records, the calibration and the inputs the
    measured choices read, and the budget's allocation (with its note)."""

    run: QuantRun
    options: QuantOptions
    records: list[WeightPlan] | Plan | None  # a plan's records, or the budget's Plan (applied alike)
    calibration: Calibration | None
    activations: Calibration | None
    notes: list[str] = field(default_factory=list)
    allocation: dict | None = None
    decided: str | None = None  # which of the measured and data-free plans was kept, and why (measured_or_free.py)
    built: Built | None = None  # the kept plan's build, run on the samples there (measured_or_free.py)

    def steps(self, ws: Workspace, opsets: dict[str, int], store=None) -> list:
        """The quant pipeline for `ws` at `opsets`."""
        return quant_pipeline(self.options, merge=self.run.decision.merge, opsets=opsets,
                              calibration=self.calibration, activations=self.activations, records=self.records,
                              store=store)

    @property
    def sampling_note(self) -> str | None:
        """What the measured choices and GPTQ read of large activations, when not all of it."""
        sampled = sorted({name for c in (self.activations, self.calibration) if c is not None for name in c.sampled})
        if not sampled:
            return None
        return (f"the inputs of {len(sampled)} weight{'s' * (len(sampled) != 1)} measured on a fixed sample of their "
                f"rows (large activations: calibration.py, CHOICE_ROWS and ROWS_PER_COLUMN)")

    @property
    def decided_by(self) -> str | None:
        # the budget's plan was made by the planner's per-weight choices, as a run without one
        records = None if isinstance(self.records, Plan) else self.records
        if self.decided is not None:
            return self.decided
        return decided_by(self.options, self.run.inputs.samples, records)


def prepare(input_path, run: QuantRun) -> Preparation:
    """The preparation (above) of `run` on the model at `input_path`: the budget's probes run
    here when it has one."""
    decision, inputs = run.decision, run.inputs
    options = run.options
    calibration = Calibration(input_path, decision.calibration, shapes=inputs.shapes) \
        if decision.calibration is not None else None
    prepared = Preparation(run, options, _records(decision.plan), calibration, None)
    if run.budget.flag is not None:
        _budget(input_path, prepared)
    if prepared.records is None:
        prepared.activations = measured_activations(input_path, prepared.options, inputs)
    if prepared.activations is not None and calibration is None:  # measured, or data-free (measured_or_free.py)
        chosen = measured_or_free(input_path, prepared.options, inputs, prepared.activations, merge=decision.merge,
                                  confirm=not run.dry_run)  # a dry run verifies nothing: no whole run to confirm
        if chosen.plan is not None:
            prepared.records, prepared.decided, prepared.built = chosen.plan, chosen.note, chosen.built
    return prepared


def quant_plan(input_path: str | os.PathLike, *, run: QuantRun | None = None, **options) -> Plan:
    """What `quant_file` with the same arguments would do to each weight (`quant --dry-run`),
    writing nothing: the options are quant_file's but for verification and output. The model is
    planned at the opset the real run upgrades it to, without upgrading it; with `plan`, that
    plan is checked against the model."""
    run = QuantRun.given(run, options, dry_run=True)
    prepared = prepare(input_path, run)
    if prepared.built is not None:
        prepared.built.discard()
    ws = open_workspace(input_path)
    try:
        opset = max(ws.opsets.get("", 1), needed_opset(ws, prepared.options, prepared.records))
        result = dry_run_pipeline(ws.graph, prepared.steps(ws, {**ws.opsets, "": opset}), overridable=ws.overridable)
    finally:
        ws.close()
    result.notes[:0] = prepared.notes + list(filter(None, [prepared.decided_by]))
    result.notes.extend(filter(None, [block_size_note(run.decision.request, [asdict(w) for w in result.weights])]))
    return result


@os_errors  # an output under a file, a folder it may not write: OutputError, as every command raises
def quant_file(input_path: str | os.PathLike, output_path: str | os.PathLike, *, run: QuantRun | None = None,
               **options) -> RunReport:
    """Quantize weights from a file to a file. The options come in groups (run_options.py), each
    given whole (`inputs=Inputs(...)`, or `run=QuantRun(...)` for all) or field by field as
    keywords:

    - what decides (Decision): the `request` (or its fields: dtype, granularity, block_size,
      symmetric, rounding, lowering, keep_quantized, target, min_elements, include, exclude,
      levels, fp16; quantization/request.py), or a `plan` (a path to a plan's JSON, its parsed dict, or
      WeightPlan records: `quant_plan` writes one), applied exactly (`report.weights` lists the
      records applied), or `dynamic`: onnxruntime's quantize_dynamic instead (activations
      quantized at run time, subgraphs enabled, Constant-node weights made initializers first so
      that it sees them), taking none of the request's options. `merge` (default True) merges
      identical weights first. With `calibration` (samples like `samples`, ideally other ones),
      weights read by MatMul, Gemm or single-group Conv get GPTQ rounding: their integers are
      chosen for a small error in the layer's output on those inputs (gptq.py). `memory`
      (bytes; None: this machine's) is the memory where it will run: where the model's float
      weights would not fit, its weights stay quantized at load (quantization/choices/load_memory.py).
    - a budget (Budget): with `target_error` (a relative L2 output error) or `target_size`
      (bytes of the output file), each weight is stored as int4, int8, float16 or float32: the
      smallest file within the error, or the smallest error that fits. What each weight costs in
      each format is measured alone in onnxruntime (quantization/choices/allocation.py);
      `report.allocation` holds each weight's format.
    - the inputs (Inputs): `samples` (else generated ones, `shapes` fixing their dimensions) and
      `outputs`, the names the error is over (default: every output but a KV cache's present*).
    - verification (Verification): unless `verify` is False, the input and the result run in
      onnxruntime on the same inputs before anything is written; with `max_error`, a result
      whose relative L2 output error exceeds it is not written (VerificationError).
    - the output (Output): `in_place` to overwrite the input; `external_data` (None: as the
      input, or for a decoder with a KV cache: `<output>.data` beside the output; False: one
      file, below the 2 GB protobuf limit).

    Where the result will run is the request's `target` (any, onnxruntime, onnxruntime-web,
    tensorrt): verification computes as that runtime does (sessions.session_settings), and the
    report says which. `runtime` "onnxruntime-web" beside target="onnxruntime" (the CLI's hidden
    --runtime) verifies com.microsoft kernels as the web build computes them. With
    target="tensorrt" it is TensorRT: weights dequantized, arithmetic in float. That target also
    narrows int64 constants where exact and checks the result against onnx-tensorrt's operator
    list (`check_file`): what TensorRT would refuse becomes warnings and `target_check`.

    Contradicting options raise OptionError (also a ValueError) before anything is read."""
    run = QuantRun.given(run, options)
    decision, inputs, verification = run.decision, run.inputs, run.verification
    out = output_for(input_path, output_path, run.output.in_place)
    if decision.calibration is not None:  # a wrong key: one line naming it, not onnxruntime's own words
        check_samples(input_path, decision.calibration, complete=False, flag="--calibration")
    prepared = None if decision.dynamic else prepare(input_path, run)
    ws = open_workspace(input_path)
    reference_runs: dict = {}  # the original runs once, for the upgrade's check and the result's
    upgrade_checks: list = []  # the opset upgrade's own check, run where the result's error is large
    # the original's runs for the verification start now, beside the quantizer (running/ahead.py)
    ahead = _reference_ahead(input_path, run, prepared, ws, reference_runs)
    try:
        report = RunReport("quant", str(input_path), output=str(out), bytes_before=ws.input_bytes)
        # weights in a data file stay in one (named after the output), and a decoder's go to one as the
        # genai builder writes them: onnxruntime maps the file instead of holding a parsed copy of the
        # weights beside its own (SmolLM2-135M, default int8: genai's export 1.08x -> 0.94x the float
        # model's memory; optimum's one-file export 1.00x -> 0.81x)
        external_data = run.output.external_data
        if external_data is None:
            external_data = ws.has_external_data_files or has_kv_cache(ws.graph)
        # the kept plan's build, made and run on the samples while choosing it (measured_or_free.py): written
        # as it is, not built again; its runs there are the verification's
        # (an upgrade's notes say "verified with the result": where nothing is verified, built again)
        reused = prepared.built.path if prepared is not None and prepared.built is not None and \
            prepared.built.reports is not None and not external_data and \
            (verification.verify or not prepared.built.notes) else None
        if prepared is None:  # --dynamic
            if decision.merge:
                ws.run_pipeline(shrink_pipeline(casts=False))  # float32 weights stay for quantize_dynamic
            ws.run_pipeline([ConstantsToInitializers()])
            report.passes = ws.reports
            produce = lambda: run_quantize_dynamic(ws, report.notes)  # noqa: E731
        else:
            report.notes.extend(prepared.notes)
            report.allocation = prepared.allocation
        if reused is not None:
            report.passes = prepared.built.reports
            _lift_plan(report)
            report.notes.extend(prepared.built.notes)  # where the run's at_required_opset writes them
            report.notes.extend(filter(None, [prepared.sampling_note,
                                              block_size_note(decision.request, report.weights or []),
                                              prepared.decided_by]))
            produce = None
        elif prepared is not None:
            ws = at_required_opset(ws, input_path, prepared.options, report, verify=verification.verify,
                                    inputs=inputs, records=prepared.records,
                                    reference_runs=reference_runs, deferred=upgrade_checks)
            if ws.files is not None:
                # quantized weights wait in a file beside the output, not in memory (its data file, if any)
                # direct: a verified one too, read back from the disk (storage/spill.py)
                ws.files.spill_into(out.parent, write_back=external_data,
                                    direct=external_data and run.runtime != "tensorrt")
            ws.run_pipeline(prepared.steps(ws, ws.opsets, store=ws.store))
            if ahead is not None:  # quantized: the original's other runs, held till now, beside the writing
                # the batch-2 sample only where the quantizer changed a reader of activations (readers.py)
                ahead.go_on(wider=not same_readers(input_path, ws.graph))
            report.passes = ws.reports
            _lift_plan(report)
            report.notes.extend(filter(None, [prepared.sampling_note,
                                              block_size_note(decision.request, report.weights or [])]))
            if prepared.calibration is not None:
                details = report.pass_report("quantize").details
                count = len(decision.calibration)
                report.notes.append(f"GPTQ rounding for {len(details['calibrated'])} of {len(details['quantized'])} "
                                    f"weights, from {count} calibration sample{'s' * (count != 1)}"
                                    + (f" ({len(details['not_calibrated'])} others: see --json, not_calibrated)"
                                       if details["not_calibrated"] else ""))
            report.notes.extend(filter(None, [prepared.decided_by]))
            produce = ws.finish

        def check(written: Path) -> None:
            if run.runtime == "tensorrt":
                check_for_tensorrt(written, report)
            if not verification.verify:
                return
            captured = prepared.activations if prepared is not None else None  # its runs: the reference's
            if written == Path(input_path) and run.runtime == "onnxruntime":  # a copy: loaded, not run
                report.verification = copy_verification(written, generated=inputs.samples is None)
                return
            # the kept plan's build ran on these samples already: the same bytes compute the same outputs;
            # else the result runs folded where that pays (running/fold_pays.py), unfolded elsewhere
            built = prepared.built if prepared is not None and not reference_runs and not external_data else None
            report.verification = compare_models(input_path, written, samples=inputs.samples, shapes=inputs.shapes,
                                                 fold_candidate=None, runtime=run.runtime, outputs=inputs.outputs,
                                                 reference_runs=reference_runs, reference_outputs=captured and
                                                 captured.reference_outputs(inputs.samples),
                                                 candidate_outputs=built.outputs if built is not None and
                                                 built.outputs is not None and same_build(built, written) else None)
            # None: nothing in the headline compared (the original's outputs all NaN), nothing to refuse
            worst, max_error = report.verification["rel_l2_error"] or 0.0, verification.max_error
            four_bit = prepared is not None and (prepared.options.four_bit or any(  # a plan's 4-bit records
                w.get("dtype") in ("int4", "uint4") for w in report.weights or ()))
            if not (worst <= large_error_line(four_bit) and (max_error is None or worst <= max_error)):
                for check_upgrade in upgrade_checks:  # the converter's doing, not the quantization's?
                    check_upgrade(report.verification["worst_sample"])
            judge(report, max_error, four_bit)

        if reused is not None:
            ws.close()
            if verification.verify or run.runtime == "tensorrt":
                check(reused)
            copy_file(reused, out)
            report.bytes_after = out.stat().st_size
            return report
        if prepared is not None and not ws.has_external_data_files and not any(p.changed for p in report.passes):
            # nothing merged or quantized (an already-quantized model, say): the input as it is. A
            # re-export changed only its initializers' order, and with it onnxruntime's memory
            # (quantize_dynamic's MiniLM: 1.05x); a copy computes what the input did, at any batch
            report.notes.append("nothing to quantize: the output is a copy of the input")
            ws.close()
            check(Path(input_path))
            copy_file(input_path, out)
            report.bytes_after = report.bytes_before
            return report
        written = write_checked(ws, produce, out, external_data,
                                check if verification.verify or run.runtime == "tensorrt" else None)
        report.bytes_after = sum(p.stat().st_size for p in written)
        return report
    finally:
        if ahead is not None:  # a run that failed never asked for them: stopped, not waited for
            ahead.cancel()
        if prepared is not None and prepared.built is not None:
            prepared.built.discard()


def _reference_ahead(input_path, run: QuantRun, prepared: Preparation | None, ws: Workspace,
                     reference_runs: dict):
    """The original's runs on the verification's samples, started on another thread while the
    model is quantized (verify.reference_ahead), or None: not verified, its outputs captured
    already on the user's inputs (the measured choices' runs), or no weight to change (a copy is
    loaded, not run: those runs would be waited for, for nothing), or GPTQ's calibration runs
    sessions of its own while it quantizes (one onnxruntime session at a time there)."""
    if not run.verification.verify or run.decision.calibration is not None or \
            prepared is not None and prepared.activations is not None:
        return None
    if prepared is not None and prepared.records is None and \
            not any_weight_to_change(ws.graph, prepared.options, ws.overridable):
        return None
    pending = reference_ahead(input_path, reference_runs, samples=run.inputs.samples, shapes=run.inputs.shapes)
    if ws.input_bytes <= AHEAD_ALL_BYTES:
        # a small model's quantizer leaves room for its larger runs: all of them now, the batch-2
        # sample once the quantized graph says it is wanted (reference_runs._verdict)
        pending.go_on(final=False)
    return pending


# Input files up to this size run all the reference's samples beside the quantizer, not only the
# first (running/ahead.py's Gate): quantizing such a model holds a few times its 64 MiB at most,
# within docs/memory.md's slack. Side by side (quant, median of 5-9 pairs): eeg_spindles 0.96x the
# time, tumor_vgg16 (65.5 MB) 0.88x, --dtype int4 0.95x, its peak +0-24 MB of a 250 MB bound.
AHEAD_ALL_BYTES = 64 * 2**20


def _records(plan: PlanSource | None) -> list[WeightPlan] | None:
    if plan is None:
        return None
    if isinstance(plan, list) and all(isinstance(r, WeightPlan) for r in plan):
        return plan
    return read_plan({"weights": plan} if isinstance(plan, list) else plan)


def _budget(input_path, prepared: Preparation) -> None:
    """The budget's allocation into `prepared`: the plan that stores each weight as allocated
    (its records applied as a --plan file's are), the options it was planned with (8 bits:
    budget.planning_options), each weight's format, and a note saying how."""
    run = prepared.run
    target_error, target_size = run.budget.target_error, run.budget.target_size
    prepared.records, allocated, probed_error = allocate(input_path, prepared.options, run.decision.merge,
                                                          run.budget, run.inputs, prepared.calibration)
    prepared.options = planning_options(prepared.options)
    prepared.allocation = allocated.formats
    counts = ", ".join(f"{len(allocated.names(f))} {f}" for f in (*allocation.FORMATS, "kept")
                       if allocated.names(f))
    goal = f"--target-error {target_error:g}" if target_error is not None else f"--target-size {target_size / 1e6:g} MB"
    prepared.notes.append(f"{goal}: weights stored as {counts or 'nothing to allocate'} (output error "
                          f"{probed_error:.3g} when planned)")


def _lift_plan(report: RunReport) -> None:
    """The quantizer's records and notes up to the run's report (`weights`, `notes`)."""
    quantize = report.pass_report("quantize")
    if quantize is not None and "weights" in quantize.details:
        report.weights = quantize.details.pop("weights")
        report.notes.extend(quantize.details.pop("plan_notes", []))
