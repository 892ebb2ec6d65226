"""`quant --target-error` / `--target-size`: each weight stored as int4, int8, float16 or float32,
by its output error in each format measured alone in onnxruntime (quantization/choices/allocation.py).
The allocation is handed to the planner as a format per weight (QuantOptions.allocation), and
the budget's result is the plan it makes: the run applies its records as it applies a --plan
file's (plan_check.check_plan), and --dry-run shows it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from ..storage.staging import save_model
from ..pipeline import dry_run_pipeline, open_workspace, quant_pipeline
from ..progress import progress
from ..quantization.choices import allocation
from ..quantization.calibration import Calibration
from ..quantization.options import QuantOptions
from ..quantization.plan import Plan
from ..report import RunReport
from ..run_options import Budget, Inputs
from ..running.verify import compare_models
from .quant_steps import measured_activations, at_required_opset, run_quant_passes, needed_opset

ALLOCATION_ROUNDS = 4


def _literal(name: str) -> str:
    """An --include pattern matching exactly `name`: each probe quantizes one weight as
    `--include NAME` would (a table or a QDQ model's weight --include names is quantized too)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def planning_options(options: QuantOptions) -> QuantOptions:
    """The options the budget plans with: `options` at 8 bits of the same signedness (4 bits are
    allocated per weight), no allocation yet."""
    eight_bit = options if not options.four_bit else options.changed(
        dtype="uint8" if options.dtype.startswith("u") else "int8")
    return eight_bit.changed(allocation=None)


def allocate(input_path, options: QuantOptions, merge: bool, budget: Budget, inputs: Inputs,
              calibration: Calibration | None = None) -> tuple[Plan, allocation.Allocation, float]:
    """Each weight stored as int4, int8 (`options.dtype`, or int8 when that is 4-bit), float16
    or float32 so as to meet `budget.target_error` at the smallest size, or `budget.target_size`
    (bytes of the whole file) at the smallest error, measured on `inputs`
    (quantization/choices/allocation.py). Each weight's error per integer format is measured
    alone in onnxruntime; an allocation for an error whose verified
    error falls short is tightened and made again (at most ALLOCATION_ROUNDS times).

    Returns (plan, allocated, error): the plan the allocation makes (the planner's records, its
    notes and figures, at the opset the run upgrades the model to), which the run applies as it
    applies a --plan file's records; the allocation (weight -> format); and the output error
    verified for it."""

    from ..graph_utils import collect_constants, iter_scopes

    base = planning_options(options)
    target_error, target_size = budget.target_error, budget.target_size

    def measured(opts: QuantOptions) -> tuple[float, int, int, list[str]]:
        """(output error, file bytes, bytes the quantizer saved, weights quantized), at the opset
        the final run will have (4-bit weights: 21, with float32 scales)."""
        ws = at_required_opset(open_workspace(input_path), input_path, opts, RunReport("quant", str(input_path)),
                                verify=False)
        run_quant_passes(ws, opts, merge, calibration, measured_activations(input_path, opts, inputs))
        quantize = ws.reports[-1]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "probe.onnx"
            save_model(ws.finish(), path, files=ws.files)
            err = compare_models(input_path, path, samples=inputs.samples, shapes=inputs.shapes,
                                 fold_candidate=False)["rel_l2_error"] or 0.0  # None: nothing compared
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
                          ("int4", base.changed(include=only, allocation={name: "int4"}))):
            err, _, saved, done = measured(opts)
            if done:
                costs.bytes[fmt], costs.error[fmt] = site.nbytes - saved, err
        stored_int8 += costs.bytes.get("int8", site.nbytes)
        weights.append(costs)
    ws.close()
    others = full_size - stored_int8  # the graph and what stays float, as the all-int8 file stores it

    def options_for(allocated: allocation.Allocation) -> QuantOptions:
        return base.changed(allocation=dict(allocated.formats))

    def planned(allocated: allocation.Allocation) -> Plan:
        return _plan(input_path, options_for(allocated), merge, inputs, calibration)

    if target_size is not None:
        room = target_size - others
        for _ in range(ALLOCATION_ROUNDS):  # sizes measured alone add up to within a few %: refit
            allocated = allocation.for_size(weights, room)
            err, size, *_ = measured(options_for(allocated))
            if size <= target_size:
                break
            room -= size - target_size
        if full_size <= target_size and full_error <= err:  # errors need not add up as planned
            allocated, err = allocation.uniform(weights, "int8"), full_error
        return planned(allocated), allocated, err
    goal = target_error
    for _ in range(ALLOCATION_ROUNDS):
        allocated = allocation.for_error(weights, goal)
        err = measured(options_for(allocated))[0]
        if err <= target_error or allocated.predicted_error == 0:
            break
        goal = allocated.predicted_error * target_error / err  # the prediction fell short by err / predicted
    return planned(allocated), allocated, err


def _plan(input_path, options: QuantOptions, merge: bool, inputs: Inputs, calibration: Calibration | None) -> Plan:
    """The planner's plan for `options` on the model, as quant --dry-run plans it: at the opset
    the run upgrades the model to, the model itself not upgraded. Where onnx's converter cannot
    upgrade it, at the model's own opset, as the probes were measured (the arith chain for 4-bit
    weights), with the note saying so: the run applies the plan's records, which it would
    refuse to fall back from."""
    ws = open_workspace(input_path)
    current = ws.opsets.get("", 1)
    upgrade = RunReport("quant", str(input_path))
    try:
        opset = max(current, needed_opset(ws, options))
        if opset > current:  # the converter's answer, as the probes had it
            upgraded = at_required_opset(open_workspace(input_path), input_path, options, upgrade, verify=False)
            opset = upgraded.opsets.get("", 1)
            upgraded.close()
        steps = quant_pipeline(options, merge=merge, opsets={**ws.opsets, "": opset}, calibration=calibration,
                               activations=measured_activations(input_path, options, inputs))
        plan = dry_run_pipeline(ws.graph, steps, overridable=ws.overridable)
    finally:
        ws.close()
    if opset == current:
        plan.notes[:0] = upgrade.notes  # the converter's refusal, where the run keeps the model's opset
    return plan
