"""`quant`: weight-only quantization, in memory or from a file to a file (verified in
onnxruntime before anything is written), and its dry run, which shows the plan and writes
nothing. What the user asked is a QuantRequest (quant/request.py), resolved once; the run's
own options (verification, budget, --plan, --dynamic) are checked against it here."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import onnx

from ..errors import OptionError, VerificationError
from ..staging import copy_file
from ..passes.constants_to_initializers import constant_nodes_to_initializers
from ..pipeline import dry_run_pipeline, open_workspace, quant_pipeline, shrink_pipeline
from ..quant.choices import allocation
from ..kv_cache import has_kv_cache
from ..quant.calibration import Calibration
from ..quant.plan import Plan, WeightPlan, read_plan
from ..quant.options import QuantOptions
from ..quant.request import QuantRequest
from ..report import RunReport
from ..feeds import check_samples
from ..verify import compare_models
from ._common import _in_memory, _write_checked, output_for
from .budget import _allocate, planning_options
from .check import _check_for_tensorrt
from .quant_steps import (_activations, _at_required_opset, _quantize_dynamic, _run_quant_passes, decided_by,
                          needed_opset)

PlanSource = str | os.PathLike | dict | list


def quant(model, *, merge: bool = True, request: QuantRequest | None = None,
          **options) -> tuple[onnx.ModelProto, RunReport]:
    """Weight-only quantization in memory (no verification; see `quant_file`). Options are the
    fields of `QuantRequest` (quant/request.py), or give the `request` itself."""
    quant_options = _request(request, options).resolve()
    result, report, _ = _in_memory(
        model, "quant", lambda ws, report: _run_quant_passes(ws, quant_options, merge),
        prepare=lambda ws, report: _at_required_opset(ws, model, quant_options, report, verify=False))
    _lift_plan(report)
    return result, report


def quant_plan(
    input_path: str | os.PathLike,
    *,
    request: QuantRequest | None = None,
    plan: PlanSource | None = None,
    merge: bool = True,
    samples: list[dict[str, np.ndarray]] | None = None,
    shapes: dict[str, list[int]] | None = None,
    target_error: float | None = None,
    target_size: int | None = None,
    calibration: list[dict[str, np.ndarray]] | None = None,
    runtime: str = "onnxruntime",
    memory: int | None = None,
    **options,
) -> Plan:
    """What `quant_file` with the same arguments would do to each weight (`quant --dry-run`),
    writing nothing. The model is planned at the opset the real run upgrades it to, without
    upgrading it; with `plan`, that plan is checked against the model."""
    request = _request(request, options)
    _check_run_options(request, plan=plan, target_error=target_error, target_size=target_size,
                       calibration=calibration, runtime=runtime)
    quant_options = request.resolve(runtime, memory)
    records = _records(plan)
    calibrated = Calibration(input_path, calibration, shapes=shapes) if calibration is not None else None
    notes, applied = [], records
    if target_error is not None or target_size is not None:  # the budget's plan, applied as --plan's records
        applied, quant_options, notes = _budget(input_path, quant_options, merge, target_error, target_size,
                                                samples, shapes, calibrated)
    ws = open_workspace(input_path)
    try:
        opset = max(ws.opsets.get("", 1), needed_opset(ws, quant_options, applied))
        activations = _activations(input_path, quant_options, samples, shapes) if applied is None else None
        steps = quant_pipeline(quant_options, merge=merge, opsets={**ws.opsets, "": opset}, calibration=calibrated,
                               activations=activations, records=applied, mapped=ws.has_external_data_files)
        result = dry_run_pipeline(ws.graph, steps, keep=ws.keep)
    finally:
        ws.close()
    result.notes[:0] = notes + list(filter(None, [decided_by(quant_options, samples, records)]))
    return result


def quant_file(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    request: QuantRequest | None = None,
    plan: PlanSource | None = None,
    merge: bool = True,
    verify: bool = True,
    max_error: float | None = None,
    samples: list[dict[str, np.ndarray]] | None = None,
    shapes: dict[str, list[int]] | None = None,
    in_place: bool = False,
    external_data: bool | None = None,
    dynamic: bool = False,
    target_error: float | None = None,
    target_size: int | None = None,
    calibration: list[dict[str, np.ndarray]] | None = None,
    runtime: str = "onnxruntime",
    outputs: tuple[str, ...] | None = None,
    memory: int | None = None,
    **options,
) -> RunReport:
    """Quantize weights from a file to a file. What to do is the `request` (or its fields as
    keyword arguments: dtype, granularity, block_size, symmetric, rounding, lowering,
    keep_quantized, target, min_elements, include, exclude, levels, fp16; quant/request.py), or
    a `plan` (a path to a plan's JSON, its parsed dict, or WeightPlan records: `quant_plan`
    writes one), applied exactly; `report.weights` lists the records applied.

    Unless `verify` is False, the input and the result run in onnxruntime on the same inputs
    (`samples`, or generated ones) before anything is written; with `max_error`, a result whose
    relative L2 output error exceeds it is not written (VerificationError). The error is over
    `outputs` (names), by default every output but a KV cache's `present*` ones.

    With `target_error` (a relative L2 output error) or `target_size` (bytes of the output
    file), each weight is stored as int4, int8, float16 or float32: the smallest file whose
    verified error is within `target_error`, or the smallest error that fits `target_size`. What
    each weight costs in each format is measured alone in onnxruntime (quant/choices/allocation.py);
    `report.allocation` holds the format of each weight.

    With `calibration` (samples like `samples`, ideally other ones), weights read by MatMul,
    Gemm or single-group Conv get GPTQ rounding: their integers are chosen for a small error in
    the layer's output on those inputs rather than in the weight itself (gptq.py).

    `dynamic` runs onnxruntime's quantize_dynamic instead (activations quantized at run time),
    with subgraphs enabled, after turning Constant-node weights into initializers so that it
    sees them; it takes none of the request's options.

    An input whose weights live in a data file, or a decoder with a KV cache, is written the
    same way (as with `external_data`): `<output>.data` beside the output; external_data=False
    keeps one file (below the 2 GB protobuf limit).

    `memory` (bytes; None: this machine's) is the memory where it will run: where the model's
    float weights would not fit, its MatMul weights stay quantized at load
    (quant/choices/load_memory.py).

    Where the result will run is the request's `target` (any, onnxruntime, onnxruntime-web,
    tensorrt): verification computes as that runtime does (sessions.session_settings), and the
    report says which. `runtime` "onnxruntime-web" beside target="onnxruntime" (the CLI's hidden
    --runtime) verifies com.microsoft kernels as the web build computes them. With
    target="tensorrt" it is TensorRT: weights dequantized, arithmetic in float. That target also
    narrows int64 constants where exact and checks the result against onnx-tensorrt's operator
    list (`check_file`): what TensorRT would refuse becomes warnings and `target_check`.

    Contradicting options raise OptionError (also a ValueError) before anything is read."""
    request = _request(request, options)
    _check_run_options(request, plan=plan, dynamic=dynamic, target_error=target_error, target_size=target_size,
                       calibration=calibration, runtime=runtime)
    if max_error is not None and not verify:
        raise OptionError("--max-error needs the verification that --no-verify skips")
    quant_options = request.resolve(runtime, memory)
    runtime = quant_options.runtime  # target onnxruntime-web: verified as the web build computes
    records = _records(plan)
    out = output_for(input_path, output_path, in_place)
    if calibration is not None:  # a wrong key: one line naming it, not onnxruntime's own words
        check_samples(input_path, calibration, complete=False, flag="--calibration")
    for_tensorrt = quant_options.target == "tensorrt"
    if for_tensorrt:
        runtime = "tensorrt"  # where it runs: verified as TensorRT computes (sessions.session_settings)
    ws = open_workspace(input_path)
    reference_runs: dict = {}  # the original runs once, for the upgrade's check and the result's
    upgrade_checks: list = []  # the opset upgrade's own check, run where the result's error is large
    report = RunReport("quant", str(input_path), output=str(out), bytes_before=ws.input_bytes)
    # weights in a data file stay in one (named after the output), and a decoder's go to one as the
    # genai builder writes them: onnxruntime maps the file instead of holding a parsed copy of the
    # weights beside its own (SmolLM2-135M, default int8: genai's export 1.08x -> 0.94x the float
    # model's memory; optimum's one-file export 1.00x -> 0.81x)
    if external_data is None:
        external_data = ws.has_external_data_files or has_kv_cache(ws.graph)
    if dynamic:
        if merge:
            ws.run_pipeline(shrink_pipeline())
        ws.run(constant_nodes_to_initializers)
        report.passes = ws.reports
        produce = lambda: _quantize_dynamic(ws)  # noqa: E731
    else:
        calibrated = Calibration(input_path, calibration, shapes=shapes) if calibration is not None else None
        applied = records
        if target_error is not None or target_size is not None:  # the budget's plan, applied as --plan's records
            applied, quant_options, notes = _budget(input_path, quant_options, merge, target_error, target_size,
                                                    samples, shapes, calibrated, report)
            report.notes.extend(notes)
        ws = _at_required_opset(ws, input_path, quant_options, report, verify=verify, samples=samples, shapes=shapes,
                                records=applied, reference_runs=reference_runs, deferred=upgrade_checks)
        if ws.files is not None:
            ws.files.spill_into(out.parent)  # quantized weights wait in a file beside the output, not in memory
        activations = _activations(input_path, quant_options, samples, shapes) if applied is None else None
        _run_quant_passes(ws, quant_options, merge, calibrated, activations, applied)
        report.passes = ws.reports
        _lift_plan(report)
        if calibrated is not None:
            details = report.pass_report("quantize").details
            report.notes.append(f"GPTQ rounding for {len(details['calibrated'])} of {len(details['quantized'])} "
                                f"weights, from {len(calibration)} calibration sample{'s' * (len(calibration) != 1)}"
                                + (f" ({len(details['not_calibrated'])} others: see --json, not_calibrated)"
                                   if details["not_calibrated"] else ""))
        report.notes.extend(filter(None, [decided_by(quant_options, samples, records)]))
        produce = ws.export

    def check(written: Path) -> None:
        if for_tensorrt:
            _check_for_tensorrt(written, report)
        if not verify:
            return
        report.verification = compare_models(input_path, written, samples=samples, shapes=shapes,
                                             fold_candidate=False, runtime=runtime, outputs=outputs,
                                             reference_runs=reference_runs)
        worst = report.verification["rel_l2_error"]
        four_bit = quant_options.four_bit or (records is not None and any(  # a plan's 4-bit records
            w.get("dtype") in ("int4", "uint4") for w in report.weights or ()))
        if not (worst <= large_error_line(four_bit) and (max_error is None or worst <= max_error)):
            for check_upgrade in upgrade_checks:  # the converter's doing, not the quantization's?
                check_upgrade()
        if max_error is not None and not worst <= max_error:
            raise VerificationError(
                f"relative L2 output error {worst:.3g} exceeds --max-error {max_error:g}; nothing written"
            )
        if max_error is None and not worst <= large_error_line(four_bit):
            report.warnings.append(_large_error_warning(report.verification, "int4" if four_bit else "int8"))

    if not dynamic and not ws.has_external_data_files and not any(p.changed for p in report.passes):
        # nothing merged or quantized (an already-quantized model, say): the input as it is. A
        # re-export changed only its initializers' order, and with it onnxruntime's memory
        # (quantize_dynamic's MiniLM: 1.05x); a copy computes what the input did, at any batch
        report.notes.append("nothing to quantize: the output is a copy of the input")
        ws.close()
        check(Path(input_path))
        copy_file(input_path, out)
        report.bytes_after = report.bytes_before
        return report
    written = _write_checked(ws, produce, out, external_data, check)
    report.bytes_after = sum(p.stat().st_size for p in written)
    return report


def _request(request: QuantRequest | None, options: dict) -> QuantRequest:
    if request is not None and options:
        raise OptionError(f"give a request or its options, not both ({', '.join(sorted(options))})")
    return request if request is not None else QuantRequest.of(**options)


def _check_run_options(request: QuantRequest, *, plan=None, dynamic: bool = False, target_error=None,
                       target_size=None, calibration=None, runtime: str = "onnxruntime") -> None:
    """The run's own options against each other and against the request: one that another
    makes meaningless is refused, in words naming both (OptionError)."""
    # --target onnxruntime-web says how the result is verified, which --dynamic's is too
    flags = " ".join(dataclasses.replace(request, target="any").flags() if request.target == "onnxruntime-web"
                     else request.flags())
    if target_error is not None and target_size is not None:
        raise OptionError("give --target-error or --target-size, not both")
    budget = "--target-error" if target_error is not None else "--target-size" if target_size is not None else None
    if dynamic:
        asked = flags or budget or ("--plan" if plan is not None else None) or \
            ("--calibration" if calibration is not None else None)
        if asked:
            raise OptionError(f"--dynamic runs onnxruntime's quantize_dynamic, which takes none of {asked}")
    if plan is not None:
        # the target stays: the plan is checked against what it takes
        asked = " ".join(dataclasses.replace(request, target="any").flags()) or budget
        if asked:
            raise OptionError(f"--plan decides every weight; {asked} does not apply (edit the plan instead)")
    stays_float = "--fp16" if request.fp16 else "--levels" if request.levels else None
    if stays_float and (calibration is not None or budget):
        raise OptionError(f"{stays_float} stores no integers; {budget or '--calibration'} does not apply")
    if request.target == "tensorrt" and runtime == "onnxruntime-web":
        raise OptionError("--target tensorrt and --runtime onnxruntime-web name two runtimes; pick one "
                          "(--target onnxruntime-web)")


def _records(plan: PlanSource | None) -> list[WeightPlan] | None:
    if plan is None:
        return None
    if isinstance(plan, list) and all(isinstance(r, WeightPlan) for r in plan):
        return plan
    return read_plan({"weights": plan} if isinstance(plan, list) else plan)


def _budget(input_path, options, merge: bool, target_error, target_size, samples, shapes, calibrated,
            report: RunReport | None = None) -> tuple[Plan, QuantOptions, list[str]]:
    """The plan that stores each weight as the budget allocates it (its records applied as a
    --plan file's are), the options it was planned with (8 bits: budget.planning_options), and a
    note saying how."""
    plan, allocated, probed_error = _allocate(
        input_path, options, merge, target_error=target_error, target_size=target_size,
        samples=samples, shapes=shapes, calibration=calibrated)
    if report is not None:
        report.allocation = allocated.formats
    counts = ", ".join(f"{len(allocated.names(f))} {f}" for f in (*allocation.FORMATS, "kept")
                       if allocated.names(f))
    goal = f"--target-error {target_error:g}" if target_error is not None else f"--target-size {target_size / 1e6:g} MB"
    return plan, planning_options(options), [f"{goal}: weights stored as {counts or 'nothing to allocate'} "
                                             f"(output error {probed_error:.3g} when planned)"]


def _lift_plan(report: RunReport) -> None:
    """The quantizer's records and notes up to the run's report (`weights`, `notes`)."""
    quantize = report.pass_report("quantize")
    if quantize is not None and "weights" in quantize.details:
        report.weights = quantize.details.pop("weights")
        report.notes.extend(quantize.details.pop("plan_notes", []))


# Above this relative L2 output error (and with no --max-error), quant warns: int8 results on the
# bench's task inputs stay within 0.01-0.13, the int4 results that change a classifier's answers
# (ALBERT-base: argmax agreement 0%) start around 0.2. A tenth is where outputs differ visibly.
LARGE_OUTPUT_ERROR = 0.1
# 4-bit weights warn at half that (issue 49): an int4 speech-quality net showed 0.092 on generated
# inputs and moved its score 3.10 -> 2.75 of 5 (11%) on real speech, unwarned; int4 answers change
# from about 0.1 (that score) to 0.2 (ALBERT), and generated inputs understate the error on task
# inputs by up to 3.6-4.8x (ddddocr; docs/design.md's "generated inputs lie"), so 0.2 / 4 = 0.05.
# int8 keeps 0.1: its results on task inputs reach 0.13 with answers unchanged.
LARGE_OUTPUT_ERROR_4BIT = 0.05


def large_error_line(four_bit: bool) -> float:
    return LARGE_OUTPUT_ERROR_4BIT if four_bit else LARGE_OUTPUT_ERROR


def _large_error_warning(verification: dict, dtype: str) -> str:
    agreements = [o["argmax_agreement"] for o in verification["outputs"].values()
                  if "argmax_agreement" in o and o.get("headline", True)]
    agree = f" (argmax agreement {min(agreements) * 100:.0f}%)" if agreements else ""
    fixes = ["int8 (--dtype int8)"] if dtype in ("int4", "uint4") else []
    fixes += ["--target-error E (each weight int4, int8, float16 or float32, by measured cost)",
              "--calibration FILE (GPTQ rounding)", "--max-error E to refuse such a result"]
    # generated inputs can overstate it: SmolLM2's int8 showed 0.57 and 58% on them, top-1 98.5% on prompts
    measured = " on generated inputs (give --inputs with real data: they may tell otherwise)" \
        if verification.get("generated") else ""
    four_bit = dtype in ("int4", "uint4")
    line = f"over {large_error_line(four_bit):g}" + (" for 4-bit weights" if four_bit else "")
    return (f"relative L2 output error {verification['rel_l2_error']:.3g}{agree}{measured} is large ({line}): "
            f"the outputs differ visibly. Try {', '.join(fixes)}")
