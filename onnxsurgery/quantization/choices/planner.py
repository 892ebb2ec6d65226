"""From options to a plan: one record per float constant, every decision made by the stages this
module runs in order, and nowhere else (quantization/plan.py says what a record holds). Each weight
that is not refused becomes a Candidate (candidate.py) that every stage reads and returns:

1. refusals.py: what is left as it is, and why;
2. forms.py: which forms fit (the weight's own options, its grouping, float16 instead);
3. rules.py: which lowering (and the opset the options need, asked before planning);
4. memory_at_load.py: what stays quantized in memory at load (load_memory.py's estimates);
5. lean.py, symmetry.py: what is measured (lean form or accurate chain, small weights as
   float16; symmetric or with zero points), in the layers' outputs where inputs were given;
6. records.py: each candidate as its record, with its why.

Planning reads weight values only where a stage needs them (NaN checks, the measured choices),
once for both where a measured choice reads the weight, and writes nothing. The model's own
facts (model_facts.py) are asked once per run. A plan made elsewhere (a plan file, the
budget's) is checked against the graph by plan_check.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, collect_constants, iter_scopes
from ..calibration import Calibration
from ..options import FLOAT_TYPES, QuantOptions
from ..plan import Plan, WeightPlan
from .candidate import Candidate
from .channel_axis import axis_free, choose_channel_axes
from .forms import float16_for_tensorrt
from .lean import choose_lean
from .memory_at_load import at_load
from .planning import Planning, options_key, planning_for
from .records import decoder_nbits_chosen, float16_record, float_record, integer_record, levels_record, planned_bytes
from .refusals import selection_notes, value_refusal
from .symmetry import SymmetryChoice, choose_symmetric


def plan_weights(graph: gs.Graph, options: QuantOptions, opset: int, overridable: frozenset[str],
                 activations: Calibration | None = None, calibration: Calibration | None = None) -> Plan:
    """The plan for every float constant of `graph` (all scopes) under `options` at `opset`.
    `activations`: the inputs each weight's readers see, for auto's measured choices;
    `calibration`: GPTQ's inputs (the weights it can round get rounding `gptq`). Where the
    weights are stored (one file, a data file, a folder) changes nothing."""
    planning = planning_for(graph)

    def make() -> Plan:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # huge finite weights: see apply
            return _plan(graph, planning, options, opset, overridable, activations, calibration)

    if activations is not None or calibration is not None:  # measured on inputs: made as asked
        return make()
    return planning.plan((options_key(options), opset, overridable), make)


def _plan(graph, planning: Planning, options: QuantOptions, opset: int, overridable, activations, calibration,
          defer_values: bool = True) -> Plan:
    """`defer_values`: the NaN/Inf check of a weight that a measured choice reads anyway (lean.py,
    symmetry.py) is made on that read, not on one of its own before; should any weight turn out
    not finite, the plan is made again with every weight checked first, so that the decisions
    are those of checking first (the refused weight counts in no budget)."""
    facts = planning.facts
    unchecked: set[str] = set()  # candidates whose values were not checked for NaN/Inf yet
    scopes = list(iter_scopes(graph))
    records: dict[str, WeightPlan] = {}
    candidates: list[Candidate] = []
    for site in collect_constants(graph, scopes):
        if site.onnx_dtype in FLOAT_TYPES:
            records[site.name] = float_record(site)
            found = _candidate(site, scopes, options, opset, overridable, planning,
                               unchecked if defer_values else None)
            if isinstance(found, Candidate):
                candidates.append(found)
            else:
                records[site.name].why = found
    details = {
        # blocks asked for, no block size near it divides the axis
        "per_channel_instead_of_blocks": [c.name for c in candidates if c.scheme.granularity != c.options.granularity
                                          and c.lowering != "lean"],
        "float16_for_tensorrt": {c.name: c.why for c in candidates if float16_for_tensorrt(c.site, c.options)}}
    candidates, room = at_load(candidates, graph, options, opset, facts)
    if activations is not None:  # what the axis, lean and symmetric stages will ask for: one capture for all
        activations.ahead([c.site for c in candidates if (options.auto_scheme and axis_free(c)) or c.lowering == "lean"
                           or (options.auto_symmetric and c.lowering not in ("scaled", "tied") and not c.float16
                               and not decoder_nbits_chosen(c, facts))])
    if options.auto_scheme:  # the axis of each weight kept quantized per channel, measured
        candidates = choose_channel_axes(candidates, activations)
    lean_choice = choose_lean([c for c in candidates if c.lowering == "lean"], options, opset,
                              total_bytes=sum(c.site.nbytes for c in candidates), activations=activations,
                              room_at_load=room)
    symmetry = SymmetryChoice()
    if options.auto_symmetric:
        symmetry = choose_symmetric([c for c in candidates if c.lowering not in ("lean", "scaled", "tied")
                                     and not c.float16 and c.name not in lean_choice.half
                                     and not decoder_nbits_chosen(c, facts)], activations)
    if unchecked:
        read = lean_choice.finite | symmetry.finite  # read whole by a measurement, and finite
        if lean_choice.not_finite | symmetry.not_finite or any(
                value_refusal(c.site) for c in candidates if c.name in unchecked and c.name not in read):
            return _plan(graph, planning, options, opset, overridable, activations, calibration, defer_values=False)
    if activations is not None:
        activations.release()  # the last stage that reads them: H freed before quantizing and verifying
    stays_float = bool(options.fp16 or options.levels)
    gptq_skipped: dict[str, str] = {}
    outcomes: dict[str, list[str]] = {}  # auto's lean-or-accurate choice: "lean" / "accurate" -> weights
    if calibration is not None and not stays_float:
        calibration.plan([c.site for c in candidates if not c.float16 and c.name not in lean_choice.half])
        gptq_skipped = dict(calibration.skipped)
    for c in candidates:
        record = records[c.name]
        if c.float16 or c.name in lean_choice.half or options.fp16:
            float16_record(record, c, options, lean_choice.lossy.get(c.name), lean_choice.sensitive.get(c.name))
        elif options.levels:
            levels_record(record, c, options)
        else:
            outcome = integer_record(record, c, options, opset, lean_choice, symmetry, facts)
            if outcome:
                outcomes.setdefault(outcome, []).append(c.name)
            if calibration is not None:
                if c.name in gptq_skipped:
                    record.why += f"; no GPTQ: {gptq_skipped[c.name]}"
                else:
                    record.rounding = "gptq"
        record.bytes_after = planned_bytes(record, c.site)
    return Plan(list(records.values()), opset, options.target, selection_notes(options, records.values()),
                importance=dict(symmetry.importance), details={
        **details,
        # auto: too small to be worth int8
        "float16_small": sorted(set(lean_choice.half) - set(lean_choice.lossy) - set(lean_choice.sensitive)),
        "float16_lossy": sorted(lean_choice.lossy),  # auto, --inputs: lossy as int8, the chain unaffordable
        "float16_sensitive": sorted(lean_choice.sensitive),  # auto: the next layer amplifies a few channels
        "symmetric_chosen": sorted(symmetry.symmetric),  # --symmetric left to quant: measured more accurate
        "lean_asymmetric": sorted(lean_choice.asymmetric),  # lean weights measured better with zero points
        "not_calibrated": gptq_skipped,  # GPTQ asked for, weight -> why it keeps ordinary rounding
        # auto: lean (`scaled`: one float copy at load) or the accurate chain (choices/lean.py)
        "lean_lowering": outcomes.get("lean", []), "accurate_lowering": outcomes.get("accurate", []),
    })


def _candidate(site: ConstantSite, scopes, options: QuantOptions, opset: int, overridable, planning: Planning,
               unchecked: set[str] | None = None) -> Candidate | str:
    """The weight as a candidate (stages 1-3), or why it is left as it is. `unchecked`: where
    given, a weight whose values only the NaN/Inf check would read is not read here, and its
    name is added (`_plan` checks it on the measurements' read)."""
    form = planning.form(site, options)  # 4-bit for the weights allocated 4 bits, ...
    opts = form.options
    no_quantized_form = float16_for_tensorrt(site, opts)
    reason = planning.refusal(site, scopes, options, overridable, qdq=True)
    if not reason and unchecked is not None and not no_quantized_form:
        unchecked.add(site.name)
    elif not reason:
        reason = value_refusal(site, float16_because=no_quantized_form)
    if reason:
        return f"below --min-elements ({opts.min_elements})" if reason == "small" else reason
    scheme = planning.scheme(site, opts)
    float16 = site.onnx_dtype == onnx.TensorProto.FLOAT and options.allocated(site.name) == "float16"
    why = "allocated float16 by the budget" if float16 else ""
    if opts.fp16 and not options.fp16:  # a per-weight rule's float16 (choices/int4_paths.py)
        float16, why = True, form.reason
    if no_quantized_form:
        float16, why = True, no_quantized_form
    return Candidate(site, opts, scheme, planning.lowering(site, opts, scheme, opset), float16, why, form.reason)
