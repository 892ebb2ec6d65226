"""Plan -> graph edits: each record's weight quantized and lowered exactly as the record says.
Nothing is decided here (quantization/choices/ decides); the rounding itself may fall back from GPTQ
to round-to-nearest where the calibration inputs cannot support it, and says so."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import (ConstantSite, NameAllocator, collect_constants, iter_scopes, read_values,
                           readers_by_graph, replace_uses, set_values)
from .axes import choose_axes
from ..progress import progress
from ..report import PassReport
from .calibration import Calibration
from .dequantizing import rewrite_planned
from .moments import calibrated_rounding
from .estimates import stored_bytes
from .lowerings import build
from .lowerings.dq import one_per_reader
from .nodes import Emitter, const
from .options import FLOAT_TYPES, Scheme
from .plan import Plan, WeightPlan
from .rounding import snap_to_levels, weight_error
from .quantize import kept_whole, quantize_args, quantize_site

log = logging.getLogger("onnxsurgery")
MAX_ERRORS_REPORTED = 10


def apply_plan(graph: gs.Graph, plan: Plan, calibration: Calibration | None = None, store=None,
               held=None) -> PassReport:
    """Rewrite `graph` in place as `plan` says; the report lists each weight's error. `store`
    (lazy.ExternalFiles with `spill_into`): the quantized payloads are moved out of memory as
    they accumulate (`offload`), so that a model's quantized weights are never all held.
    `held` (held_roundings.HeldRoundings): the plan's roundings, taken instead of reading those
    weights again."""
    # Weights with huge (finite) values overflow float32 sums in the error figures; numpy's
    # warnings about it must not reach the user's terminal (NaN/Inf weights are never planned)
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return _apply(graph, plan, calibration, store, held)
    finally:
        if calibration is not None:
            calibration.release()  # GPTQ's H, before verification


def _apply(graph: gs.Graph, plan: Plan, calibration: Calibration | None, store, held) -> PassReport:
    report = PassReport("quantize")
    sites = {s.name: s for s in collect_constants(graph, list(iter_scopes(graph))) if s.onnx_dtype in FLOAT_TYPES}
    names = NameAllocator(graph)
    errors, schemes, balanced, calibrated = [], {}, [], []
    not_calibrated = dict(plan.details.get("not_calibrated", {}))
    # A second thread reads the next weight's bytes and measures the last one's error while this
    # one quantizes and edits the graph (the edits stay on this thread, in the plan's order), as
    # long as the two weights add up to no more than the largest (parallel.py says why).
    largest = max((record.bytes_before for record in plan.changed), default=0)
    with ThreadPoolExecutor(1) as helper:
        measured = []  # (record, future of its error)
        # the weights the plan rounded on its read as their records say (issue 58): not read again,
        # their roundings taken one at a time (those past the budget wait in a file: held_roundings)
        kept = {r.name for r in plan.changed if r.dtype != "float16" and r.lowering != "levels"
                and r.rounding != "gptq" and kept_whole(sites[r.name], *_rounding(r, plan), held, peek=True)}
        log.debug("quantize: %d of %d weights rounded on the plan's read", len(kept), len(plan.changed))
        for record, values in progress(_read_ahead(plan.changed, sites, helper, largest, kept), "quantize",
                                       total=len(plan.changed), unit="weight"):
            site = sites[record.name]
            stored = record.bytes_after  # exact for float16 and levels; integers: measured below
            if record.dtype == "float16":
                err = _store_as_float16(site, values, names)
            elif record.lowering == "levels":
                err = _snap(site, values, record)
            else:
                taken = kept_whole(site, *_rounding(record, plan), held) if record.name in kept else None
                if taken is None and values is None:  # not held after all: read as before
                    values = read_values(site.tensor).astype(np.float32, copy=False)
                err, stored, gptq_refused = _store_as_integers(site, values, record, names, plan, calibration, helper,
                                                               taken)
                if record.rounding == "gptq":
                    if gptq_refused:
                        not_calibrated[record.name] = gptq_refused
                    else:
                        calibrated.append(record.name)
                elif record.rounding == "balanced":
                    balanced.append(record.name)
            del values
            if isinstance(err, Future) and 2 * record.bytes_before > largest:
                err = err.result()  # a large weight's error measured before the next weight is quantized
            measured.append((record, err))
            if store is not None:
                store.produced(graph, stored)
            report.changed += 1
            report.bytes_saved += record.bytes_before - stored
            schemes[record.label] = schemes.get(record.label, 0) + 1
        for record, err in measured:
            err = err.result() if isinstance(err, Future) else err
            errors.append({"name": record.name, "shape": record.shape, "scheme": record.label, **err})
            log.info("quantize: %s %s as %s, weight error %.3g", record.name, record.shape, record.label,
                     err["rel_l2_error"])
    if held is not None:
        held.release()  # the plan's roundings of forms a later rule changed
    rewritten = rewrite_planned(graph, plan, names)  # a quantized model's own Cast -> Mul (dequantizing.py)
    report.changed += rewritten
    if store is not None:
        store.offload(graph)
    for record in plan.weights:
        if not record.changes and not record.why.startswith("below --min-elements") and record.why:
            report.skip(record.name, record.why)
    errors.sort(key=lambda e: -e["rel_l2_error"])
    report.details = {
        "schemes": schemes, "quantized": [e["name"] for e in errors], "largest_errors": errors[:MAX_ERRORS_REPORTED],
        **{k: v for k, v in plan.details.items() if k != "not_calibrated"},
        "balanced_rounding": balanced, "rewritten": rewritten,
        "calibrated": calibrated, "not_calibrated": not_calibrated,
        "max_weight_rel_l2_error": errors[0]["rel_l2_error"] if errors else 0.0}
    return report


def _read_ahead(records: list[WeightPlan], sites: dict, helper: ThreadPoolExecutor, largest: int, kept: set):
    """(record, its float32 values) for each record, the next one's read on `helper` meanwhile
    where the two add up to no more than `largest` bytes; None for those in `kept` (not read)."""
    def read(record: WeightPlan) -> np.ndarray | None:
        if record.name in kept:
            return None
        return read_values(sites[record.name].tensor).astype(np.float32, copy=False)

    upcoming = None
    for i, record in enumerate(records):
        values = upcoming.result() if upcoming is not None else read(record)
        following = records[i + 1] if i + 1 < len(records) else None
        fits = following is not None and record.bytes_before + following.bytes_before <= largest
        upcoming = helper.submit(read, following) if fits else None
        yield record, values
        del values


def _store_as_integers(site: ConstantSite, values: np.ndarray, record: WeightPlan, names: NameAllocator,
                       plan: Plan, calibration: Calibration | None,
                       helper: ThreadPoolExecutor, kept: tuple | None = None) -> tuple[Future | dict, int, str | None]:
    """Quantize and lower one weight; returns its error (measured on `helper`), the bytes it
    stores (scales may be float32 where the plan counted float16: arith stores them in float16
    only where they fit) and why GPTQ was refused, if it was. `kept`: (Quantized, error) the
    plan made of this weight (`values` is then None)."""
    if kept is not None:
        qt, error = kept
        _lower(site, qt, record, names, plan)
        return error, stored_bytes(qt, record.lowering), None
    scheme, lowering, balanced, args = _rounding(record, plan)
    moments = calibration.moments(site) if calibration is not None and record.rounding == "gptq" else None
    qt = quantize_site(values, site, scheme, lowering, balanced, args, equalized=moments is None)
    refused = None
    if moments is not None:
        channel_axis, block_axis = choose_axes(site)
        gptq_args = {k: v for k, v in args.items() if k not in ("search_clip", "importance")}  # GPTQ sets its ranges
        qt, refused = calibrated_rounding(values, moments, qt, channel_axis=channel_axis, block_axis=block_axis,
                                          **gptq_args)
    elif record.rounding == "gptq":
        refused = "no calibration inputs reach it"
    _lower(site, qt, record, names, plan)
    return helper.submit(weight_error, values, qt), stored_bytes(qt, record.lowering), refused


def _rounding(record: WeightPlan, plan: Plan) -> tuple[Scheme, str, bool, dict]:
    """(scheme, lowering, balanced, quantize()'s arguments) of a record's integer form."""
    scheme = Scheme(record.granularity, record.axis, record.block_size)
    args = quantize_args(record.dtype, scheme, record.lowering, record.symmetric, plan.importance.get(record.name))
    return scheme, record.lowering, record.rounding == "balanced", args


def _lower(site: ConstantSite, qt, record: WeightPlan, names: NameAllocator, plan: Plan) -> None:
    """The graph's nodes for `qt` in place of the weight."""
    rebuilt = build(site, qt, record.lowering, names, plan.opset)
    if rebuilt is not None:
        replace_uses(site.value, rebuilt)
        if plan.target == "tensorrt" and record.lowering in ("dq", "dq_equalized"):  # one DQ per reader
            one_per_reader(rebuilt, site.scope.graph, names)


def _store_as_float16(site: ConstantSite, values: np.ndarray, names: NameAllocator) -> dict:
    """float16 storage and a Cast back to float32."""
    half = values.astype(np.float16)
    stored = const(names, f"{site.name}_fp16", half)
    # One Cast in each graph that reads the weight, not one in the scope feeding a subgraph:
    # onnxruntime's FuseInitializersTransformer (1.31, constant folding off) fails to load a
    # model whose float16-initializer Cast is read only implicitly by an If/Loop/Scan node
    # (silero-vad's LSTM weights).
    for graph, readers in readers_by_graph(site):
        out = Emitter(graph, names, site.name)("Cast", [stored], shape=list(site.shape), to=onnx.TensorProto.FLOAT)
        for node, index in readers:
            node.inputs[index] = out
    return _error(values, half.astype(np.float32))


def _snap(site: ConstantSite, values: np.ndarray, record: WeightPlan) -> dict:
    """--levels: values snapped in place, storage unchanged."""
    snapped = snap_to_levels(values, record.levels, granularity=record.granularity, axis=record.axis,
                             block_size=record.block_size)
    stored = snapped.astype(values.dtype if site.onnx_dtype == onnx.TensorProto.FLOAT else FLOAT_TYPES[site.onnx_dtype])
    if site.node is None:
        set_values(site.tensor, stored)
    else:
        site.node.attrs["value"] = gs.Constant(site.tensor.name, stored)
    return _error(values, stored.astype(np.float32))


def _error(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    diff = y.astype(np.float64)
    diff -= x  # in place, and the largest |diff| without an array of them: 2 of 3 temporaries fewer
    norm = float(np.linalg.norm(x))
    return {"max_abs_error": float(max(diff.max(), -diff.min())) if diff.size else 0.0,
            "rel_l2_error": float(np.linalg.norm(diff) / norm) if norm > 0 else 0.0}
