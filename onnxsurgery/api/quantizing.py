"""`quant`: weight-only quantization, in memory or from a file to a file (verified in
onnxruntime before anything is written), with what it takes: the opset upgrade a scheme needs,
the per-weight allocation for --target-error / --target-size, onnxruntime's quantize_dynamic."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

from ..errors import InputError, UnsupportedModelError, VerificationError
from ..io import check_output_path, load_model, save_model
from ..opset import upgrade_opset
from ..passes.constants_to_initializers import constant_nodes_to_initializers
from ..pipeline import Workspace, open_workspace, quant_pipeline, shrink_pipeline
from ..progress import progress
from ..quant import allocation
from ..quant.calibration import Calibration
from ..quant.options import QuantOptions
from ..quant.schemes import required_opset
from ..report import RunReport
from ..verify import compare_models
from ._common import _in_memory, _write_checked
from .check import _check_for_tensorrt


# An upgraded model may differ from the original by float reassociation in a converted op.
UPGRADE_TOLERANCE = 1e-5


def _activations(input_path, options: QuantOptions, samples, shapes) -> Calibration | None:
    """What auto's measured choices (lean or accurate, symmetric or not) read: each layer's
    input on the verification inputs. The budget's probes use it too, so that their int8 is the
    default's."""
    if options.auto_scheme or options.auto_symmetric:
        return Calibration(input_path, samples or [{}], shapes=shapes)
    return None


def _run_quant_passes(ws: Workspace, options: QuantOptions, merge: bool,
                      calibration: Calibration | None = None, activations: Calibration | None = None) -> None:
    ws.run_pipeline(quant_pipeline(options, merge=merge, opsets=ws.opsets, calibration=calibration,
                                   activations=activations))


def quant(model, *, merge: bool = True, **options) -> tuple[onnx.ModelProto, RunReport]:
    """Weight-only quantization in memory (no verification; see `quant_file`). Options are
    the fields of `QuantOptions`: dtype (int8), granularity (block), block_size (32),
    symmetric (False), rounding (auto), lowering (auto), min_elements (4096), include, exclude,
    levels, fp16."""
    quant_options = QuantOptions(**options)
    result, report, _ = _in_memory(
        model, "quant", lambda ws, report: _run_quant_passes(ws, quant_options, merge),
        prepare=lambda ws, report: _at_required_opset(ws, model, quant_options, report, verify=False))
    return result, report


def quant_file(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    merge: bool = True,
    verify: bool = True,
    max_error: float | None = None,
    samples: list[dict[str, np.ndarray]] | None = None,
    shapes: dict[str, list[int]] | None = None,
    in_place: bool = False,
    external_data: bool = False,
    dynamic: bool = False,
    target_error: float | None = None,
    target_size: int | None = None,
    calibration: list[dict[str, np.ndarray]] | None = None,
    runtime: str = "onnxruntime",
    **options,
) -> RunReport:
    """Quantize weights from a file to a file. Unless `verify` is False, the input and the
    result run in onnxruntime on the same inputs (`samples`, or generated ones) before anything
    is written; with `max_error`, a result whose relative L2 output error exceeds it is not
    written (VerificationError).

    With `target_error` (a relative L2 output error) or `target_size` (bytes of the output
    file), each weight is stored as int4, int8, float16 or float32: the smallest file whose
    verified error is within `target_error`, or the smallest error that fits `target_size`. What
    each weight costs in each format is measured alone in onnxruntime (quant/allocation.py);
    `report.allocation` holds the format of each weight.

    With `calibration` (samples like `samples`, ideally other ones), weights read by MatMul,
    Gemm or single-group Conv get GPTQ rounding: their integers are chosen for a small error in
    the layer's output on those inputs rather than in the weight itself (gptq.py).

    `dynamic` runs onnxruntime's quantize_dynamic instead (activations quantized at run time),
    with subgraphs enabled, after turning Constant-node weights into initializers so that it
    sees them.

    `runtime` ("onnxruntime" or "onnxruntime-web") is where the result will run: verification
    computes as that runtime does (verify.session_settings), and the report says which. With
    target="tensorrt" it is TensorRT: weights dequantized, arithmetic in float. That target also
    narrows int64 constants where exact and checks the result against onnx-tensorrt's operator
    list (`check_file`): what TensorRT would refuse becomes warnings and `target_check`."""
    out = check_output_path(input_path, output_path, in_place)
    for_tensorrt = options.get("target") == "tensorrt"
    if for_tensorrt:
        runtime = "tensorrt"  # where it runs: verified as TensorRT computes (verify.session_settings)
    ws = open_workspace(input_path)
    report = RunReport("quant", str(input_path), output=str(out), bytes_before=ws.input_bytes)
    if dynamic:
        if merge:
            ws.run_pipeline(shrink_pipeline())
        ws.run(constant_nodes_to_initializers)
        report.passes = ws.reports
        produce = lambda: _quantize_dynamic(ws)  # noqa: E731
    else:
        quant_options = QuantOptions(**options)
        calibrated = Calibration(input_path, calibration, shapes=shapes) if calibration is not None else None
        budget = target_error is not None or target_size is not None
        if budget:
            if target_error is not None and target_size is not None:
                raise InputError("give --target-error or --target-size, not both")
            quant_options, plan, probed_error = _allocate(
                input_path, quant_options, merge, target_error=target_error, target_size=target_size,
                samples=samples, shapes=shapes, calibration=calibrated)
            report.allocation = plan.formats
            counts = ", ".join(f"{len(plan.names(f))} {f}" for f in (*allocation.FORMATS, "kept") if plan.names(f))
            goal = f"--target-error {target_error:g}" if target_error is not None else \
                f"--target-size {target_size / 1e6:g} MB"
            report.notes.append(f"{goal}: weights stored as {counts or 'nothing to allocate'} (output error "
                                f"{probed_error:.3g} when planned)")
        ws = _at_required_opset(ws, input_path, quant_options, report, verify=verify, samples=samples, shapes=shapes)
        _run_quant_passes(ws, quant_options, merge, calibrated,
                          _activations(input_path, quant_options, samples, shapes))
        report.passes = ws.reports
        if calibrated is not None:
            details = ws.reports[-1].details
            report.notes.append(f"GPTQ rounding for {len(details['calibrated'])} of {ws.reports[-1].changed} weights, "
                                f"from {len(calibration)} calibration sample{'s' * (len(calibration) != 1)}"
                                + (f" ({len(details['not_calibrated'])} others: see --json, not_calibrated)"
                                   if details["not_calibrated"] else ""))
        produce = ws.export

    def check(written: Path) -> None:
        if for_tensorrt:
            _check_for_tensorrt(written, report)
        if not verify:
            return
        report.verification = compare_models(input_path, written, samples=samples, shapes=shapes,
                                             fold_candidate=False, runtime=runtime)
        worst = report.verification["rel_l2_error"]
        if max_error is not None and not worst <= max_error:
            raise VerificationError(
                f"relative L2 output error {worst:.3g} exceeds --max-error {max_error:g}; nothing written"
            )
        if max_error is None and not worst <= LARGE_OUTPUT_ERROR:
            report.warnings.append(_large_error_warning(report.verification, options.get("dtype", "int8")))

    written = _write_checked(ws, produce, out, external_data, check)
    report.bytes_after = sum(p.stat().st_size for p in written)
    return report


# Above this relative L2 output error (and with no --max-error), quant warns: int8 results on the
# bench's task inputs stay within 0.01-0.13, the int4 results that change a classifier's answers
# (ALBERT-base: argmax agreement 0%) start around 0.2. A tenth is where outputs differ visibly.
LARGE_OUTPUT_ERROR = 0.1


def _large_error_warning(verification: dict, dtype: str) -> str:
    agreements = [o["argmax_agreement"] for o in verification["outputs"].values() if "argmax_agreement" in o]
    agree = f" (argmax agreement {min(agreements) * 100:.0f}%)" if agreements else ""
    fixes = ["int8 (--dtype int8)"] if dtype in ("int4", "uint4") else []
    fixes += ["--target-error E (each weight int4, int8, float16 or float32, by measured cost)",
              "--calibration FILE (GPTQ rounding)", "--max-error E to refuse such a result"]
    return (f"relative L2 output error {verification['rel_l2_error']:.3g}{agree} is large (over "
            f"{LARGE_OUTPUT_ERROR:g}): the outputs differ visibly. Try {', '.join(fixes)}")


def _at_required_opset(ws: Workspace, source, options: QuantOptions, report: RunReport, *, verify: bool,
                       samples=None, shapes=None) -> Workspace:
    """`ws`, or a workspace on the model upgraded to the opset the lowering needs (opset.py),
    checked in onnxruntime against the original first when `verify`. Where `auto` asked for the
    newer opset (4-bit weights; recurrent weights under the int8 default) and the upgrade fails,
    the model stays at its opset and the arith chain is used instead, with a note; an explicit
    `dq` or keep_quantized refuses."""
    needed, current = required_opset(options, ws.graph), ws.opsets.get("", 1)
    if needed <= current or ws.template is None:
        return ws
    model = load_model(source) if isinstance(source, (str, os.PathLike)) else ws.materialized(ws.template)
    try:
        upgraded = upgrade_opset(model, needed)
    except UnsupportedModelError as e:
        if options.lowering == "dq" or options.keep_quantized:
            raise
        report.notes.append(f"{e}; kept opset {current}, so "
                            + ("4-bit weights use" if options.four_bit else "recurrent weights keep")
                            + " the arith chain")
        return ws
    ws.close()
    del model
    note = f"upgraded opset {current} -> {needed} with onnx's version converter"
    if verify:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "upgraded.onnx"
            save_model(upgraded, path)
            check = compare_models(source, path, samples=samples, shapes=shapes)
        if not check["rel_l2_error"] <= UPGRADE_TOLERANCE:
            raise VerificationError(f"the model upgraded to opset {needed} computes other outputs than the input "
                                    f"(relative L2 {check['rel_l2_error']:.3g}); nothing written")
        note += f", verified in onnxruntime (max abs error {check['max_abs_error']:.3g})"
    report.notes.append(note)
    bytes_before = ws.input_bytes
    ws = open_workspace(upgraded)
    ws.input_bytes = bytes_before
    return ws


ALLOCATION_ROUNDS = 4


def _literal(name: str) -> str:
    """A glob pattern matching exactly `name`."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _allocate(input_path, options: QuantOptions, merge: bool, *, target_error: float | None,
              target_size: int | None, samples=None, shapes=None,
              calibration: Calibration | None = None) -> tuple[QuantOptions, allocation.Plan, float]:
    """Options that store each weight as int4, int8 (`options.dtype`, or int8 when that is 4-bit),
    float16 or float32 so as to meet `target_error` at the smallest size, or `target_size`
    (bytes of the whole file) at the smallest error (quant/allocation.py). Each weight's error
    per integer format is measured alone in onnxruntime; a plan for an error whose verified error
    falls short is tightened and planned again (at most ALLOCATION_ROUNDS times). Returns the
    options, the plan and its verified output error."""

    from ..graph_utils import collect_constants, iter_scopes

    eight_bit = options if not options.four_bit else options.changed(
        dtype="uint8" if options.dtype.startswith("u") else "int8")
    base = eight_bit.changed(int4_for=(), fp16_for=())

    def measured(opts: QuantOptions) -> tuple[float, int, int, list[str]]:
        """(output error, file bytes, bytes the quantizer saved, weights quantized), at the opset
        the final run will have (4-bit weights: 21, with float32 scales)."""
        ws = _at_required_opset(open_workspace(input_path), input_path, opts, RunReport("quant", str(input_path)),
                                verify=False)
        _run_quant_passes(ws, opts, merge, calibration, _activations(input_path, opts, samples, shapes))
        quantize = ws.reports[-1]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "probe.onnx"
            save_model(ws.export(), path, files=ws.files)
            err = compare_models(input_path, path, samples=samples, shapes=shapes,
                                 fold_candidate=False)["rel_l2_error"]
            size = path.stat().st_size
        ws.close()
        return err, size, quantize.bytes_saved, quantize.details["quantized"]

    full_error, full_size, _, names = measured(base)
    ws = open_workspace(input_path)
    sites = {site.name: site for site in collect_constants(ws.graph, list(iter_scopes(ws.graph)))}
    weights, stored_int8 = [], 0
    for name in progress(names, "measure each weight alone", unit="weight"):
        site, only = sites[name], (_literal(name),)
        costs = allocation.WeightCosts(name, {"float32" if site.onnx_dtype == onnx.TensorProto.FLOAT else "kept":
                                              site.nbytes})
        if site.onnx_dtype == onnx.TensorProto.FLOAT:
            costs.bytes["float16"] = 2 * site.num_elements
        for fmt, opts in (("int8", base.changed(include=only)),
                          ("int4", base.changed(include=only, int4_for=only))):
            err, _, saved, done = measured(opts)
            if done:
                costs.bytes[fmt], costs.error[fmt] = site.nbytes - saved, err
        stored_int8 += costs.bytes.get("int8", site.nbytes)
        weights.append(costs)
    ws.close()
    others = full_size - stored_int8  # the graph and what stays float, as the all-int8 file stores it

    def options_for(plan: allocation.Plan) -> QuantOptions:
        return base.changed(
            int4_for=tuple(_literal(n) for n in plan.names("int4")),
            fp16_for=tuple(options.fp16_for) + tuple(_literal(n) for n in plan.names("float16")),
            exclude=tuple(options.exclude) + tuple(_literal(n) for n in plan.names("float32") + plan.names("kept")))

    if target_size is not None:
        room = target_size - others
        for _ in range(ALLOCATION_ROUNDS):  # sizes measured alone add up to within a few %: refit
            plan = allocation.for_size(weights, room)
            err, size, *_ = measured(options_for(plan))
            if size <= target_size:
                break
            room -= size - target_size
        if full_size <= target_size and full_error <= err:  # errors need not add up as planned
            plan, err = allocation.uniform(weights, "int8"), full_error
        return options_for(plan), plan, err
    goal = target_error
    for _ in range(ALLOCATION_ROUNDS):
        plan = allocation.for_error(weights, goal)
        err = measured(options_for(plan))[0]
        if err <= target_error or plan.predicted_error == 0:
            break
        goal = plan.predicted_error * target_error / err  # the prediction fell short by err / predicted
    return options_for(plan), plan, err


def _quantize_dynamic(ws: Workspace) -> onnx.ModelProto:
    """onnxruntime's quantize_dynamic on the workspace's graph, through temporary files."""
    from onnxruntime.quantization import quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        save_model(ws.export(), src, files=ws.files)
        try:
            quantize_dynamic(str(src), str(dst), extra_options={"EnableSubgraph": True})
        except Exception as e:  # its own errors: report them in one line
            raise UnsupportedModelError(f"quantize_dynamic failed: {str(e).splitlines()[0]}") from e
        # Its output can list nodes out of order around subgraphs that read outer values;
        # one more pass through gs sorts them.
        return open_workspace(load_model(dst)).finish()
