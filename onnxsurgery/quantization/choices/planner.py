"""From options to a plan: one record per float constant, every decision made by the stages this
module runs in order (STAGES), and nowhere else (quantization/plan.py says what a record holds).
Each float weight starts as a Candidate (candidate.py); each stage is a function of the
candidates and the run's PlanContext that returns the candidates, changed where it decides, and
what a later stage reads of an earlier one's outcome is on the Candidate or the context: no
stage module imports another (tests/test_planning.py), the facts they share are weights.py's,
the measure in a layer's output measures.py's.

1. forms.own_options: each weight's own options (the budget's 4 bits, TensorRT's limits, the
   forms its readers call for: fused_forms.py, int4_paths.py);
2. refusals.refuse: what is left as it is, and why (its record says so; it is dropped);
3. forms.group: its grouping, and float16 instead of integers where a rule says so;
4. rules.lower: which lowering (and the decoder's 8-bit MatMulNBits); recurrent_tables.py: an
   embedding table a recurrent layer reads, float16;
5. memory_at_load.py: what stays quantized in memory at load (load_memory.py's estimates), and
   dequantized.py: a quantized model's own Cast -> Mul weights rewritten to stay 8-bit at load;
6. channel_axis.py, lean.py, symmetry.py: what is measured (the axis of a weight kept per
   channel; lean form or accurate chain, small weights as float16; symmetric or with zero
   points), in the layers' outputs where inputs were given; then the NaN/Inf check of the
   weights no measurement read, and which weights GPTQ rounds;
7. records.write: each candidate as its record, with its why.

Stages 1-4 ask the planning run (planning.py), which answers each weight's form, grouping,
lowering and refusal once for every question asked of the graph (the required opset, `info`'s
estimates, plan_edits.py). The shared stages (memory_at_load, channel_axis, lean, symmetry) keep
their own entry functions this round; the small adapters below hand them the context.

Planning reads weight values only where a stage needs them (NaN checks, the measured choices),
once for both where a measured choice reads the weight, and writes nothing. A plan made
elsewhere (a plan file, the budget's) is checked against the graph by plan_check.py.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import collect_constants, iter_scopes
from ..lowerings.weight_readers import effective_readers
from ..calibration import Calibration
from ..options import FLOAT_TYPES, QuantOptions
from ..plan import Plan
from . import forms, int4_saving, records, refusals, rules
from .candidate import Candidate, PlanContext
from .channel_axis import axis_free, choose_channel_axes
from .crash_edges import avoid_crash_edges
from .dequantized import dequantize
from .int4_paths import CONV_OPS, CONV_SHARE, conv_share
from .lean import choose_lean
from .memory_at_load import at_load
from .planning import Planning, options_key, planning_for
from .recurrent_inputs import keep_recurrent_inputs
from .recurrent_tables import keep_recurrent_tables
from .symmetry import SymmetryChoice, choose_symmetric


def plan_weights(graph: gs.Graph, options: QuantOptions, opset: int, overridable: frozenset[str],
                 activations: Calibration | None = None, calibration: Calibration | None = None,
                 held=None) -> Plan:
    """The plan for every float constant of `graph` (all scopes) under `options` at `opset`.
    `activations`: the inputs each weight's readers see, for auto's measured choices;
    `calibration`: GPTQ's inputs (the weights it can round get rounding `gptq`). Where the
    weights are stored (one file, a data file, a folder) changes nothing. `held`
    (held_roundings.HeldRoundings, the pass's): where given, the measurements' whole-weight
    roundings of the forms they chose are kept there for the pass (quantize.keep_whole)."""
    planning = planning_for(graph)

    def make() -> Plan:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # huge finite weights: see apply
            return _plan(graph, planning, options, opset, overridable, activations, calibration, held=held)

    if activations is not None or calibration is not None:  # measured on inputs: made as asked
        plan = make()
    else:
        plan = planning.plan((options_key(options), opset, overridable), make)
    if int4_saving.applies(options, calibration):
        plan = _int4_worth(graph, plan, options, opset, overridable)
    return plan


def _int4_worth(graph: gs.Graph, plan: Plan, options: QuantOptions, opset: int, overridable) -> Plan:
    """The int8 default's plan where --dtype int4 saves under int4_saving.SAVING of its weight
    bytes (int4_saving.py), at the same opset and judged in the weights (no inputs: the bytes
    are the forms', and the int8 plan of a run with --inputs is then the one without)."""
    fixed = int4_saving.other_bytes(graph)
    if int4_saving.clearly_worth(plan, fixed):
        return plan
    int8 = plan_weights(graph, int4_saving.int8_options(options), opset, overridable)
    share = int4_saving.saving(plan, int8, fixed)
    return plan if share >= int4_saving.SAVING else int4_saving.kept_int8(plan, int8, share)


def _at_load(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    candidates, ctx.room = at_load(candidates, ctx.graph, ctx.options, ctx.opset, ctx.facts)
    return candidates


def _capture(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """What the axis, lean and symmetric stages will ask of the inputs: one capture for all."""
    options = ctx.options
    if ctx.activations is not None:
        ctx.activations.ahead([c.site for c in candidates if (options.auto_scheme and axis_free(c))
                               or c.lowering == "lean"
                               or (options.auto_symmetric and c.lowering not in ("scaled", "tied") and not c.float16
                                   and not records.decoder_nbits_chosen(c))])
    return candidates


def _channel_axes(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The axis of each weight kept quantized per channel, measured (auto's scheme only)."""
    return choose_channel_axes(candidates, ctx.activations, ctx.opset) if ctx.options.auto_scheme else candidates


def _lean(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    ctx.lean = choose_lean([c for c in candidates if c.lowering == "lean"], ctx.options, ctx.opset,
                           # in float32 bytes: a 16-bit model gets its float32 values' shares (issue 55)
                           total_bytes=sum(4 * c.site.num_elements for c in candidates), activations=ctx.activations,
                           room_at_load=ctx.room, held=ctx.held, decoder_step=ctx.facts.kv_cache)
    if ctx.options.four_bit:
        _int4_convs_half(candidates, ctx)
    return candidates


def _int4_convs_half(candidates: list[Candidate], ctx: PlanContext) -> None:
    """Under --dtype int4, in a model whose convolutions hold at most int4_paths.CONV_SHARE of its
    weights' bytes (where the int4 rules store them all int8 for memory), the Conv weights int4_paths
    stores as int8 `scaled` get the int8 default's
    float16 where it gives them that for being small (lean.py's first stage: the lossiest as int8 within
    SMALL_FLOAT16_SHARE, judged in the weights as without --inputs): they skipped its measurement, being
    `scaled` and not `lean`.
    chemnet_fcd's two Convs over one-hot SMILES (4,480 and 4,096 elements; per output channel, a rare
    symbol's weight sets the scale of the common ones) took its activations from 0.031 (int8's float16)
    to 0.170 on the report molecules, for 7.5 KB."""
    if conv_share(ctx.options.min_elements, ctx.facts) > CONV_SHARE:
        return  # convolutions hold most of the weights: float16 costs bytes (28 zoo int4 plans moved, +0.2-6%)
    eight = [c for c in candidates if c.lowering == "scaled" and not c.options.four_bit and not c.float16
             and (readers := effective_readers(c.site)) and all(n.op in CONV_OPS and i == 1 for n, i in readers)]
    if not eight:
        return
    extra = choose_lean(eight, ctx.options, ctx.opset, total_bytes=sum(4 * c.site.num_elements for c in candidates))
    # the small weights' float16 only: the sensitive and lossy stages' (larger weights, the next layer's
    # gain) would move silero-vad's and PP-OCRv4 rec's int4 plans too, unmeasured this round
    ctx.lean.half |= extra.half - set(extra.sensitive) - set(extra.lossy) - set(extra.spiked)


def _symmetry(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    ctx.symmetry = SymmetryChoice()
    if ctx.options.auto_symmetric:
        ctx.symmetry = choose_symmetric([c for c in candidates if c.lowering not in ("lean", "scaled", "tied")
                                         and not c.float16 and c.name not in ctx.lean.half
                                         and not records.decoder_nbits_chosen(c)], ctx.activations, ctx.held)
    return candidates


def _values_checked(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The NaN/Inf check of the weights refusals.refuse left unread: on the measurements' read,
    else now. Should any weight not be finite, `ctx.again`: the plan is made again with every
    weight checked first, so that the decisions are those of checking first (the refused weight
    counts in no budget). Else the inputs are let go (H freed before quantizing and verifying)."""
    if ctx.unchecked:
        lean, symmetry = ctx.lean, ctx.symmetry
        read = lean.finite | symmetry.finite  # read whole by a measurement, and finite
        ctx.again = bool(lean.not_finite | symmetry.not_finite) or any(
            refusals.value_refusal(c.site) for c in candidates if c.name in ctx.unchecked and c.name not in read)
    if not ctx.again and ctx.activations is not None:
        ctx.activations.release()  # the last stage that reads them
    return candidates


def _gptq(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """Which weights GPTQ rounds (calibration.py), where calibration inputs were given."""
    if ctx.calibration is not None and not (ctx.options.fp16 or ctx.options.levels):
        ctx.calibration.plan([c.site for c in candidates if not c.float16 and c.name not in ctx.lean.half])
        ctx.gptq_skipped = dict(ctx.calibration.skipped)
    return candidates


STAGES = (forms.own_options, refusals.refuse, forms.group, rules.lower, avoid_crash_edges, keep_recurrent_tables,
          keep_recurrent_inputs, _at_load, dequantize, _capture, _channel_axes, _lean, _symmetry, _values_checked,
          _gptq, records.write)


def _plan(graph, planning: Planning, options: QuantOptions, opset: int, overridable, activations, calibration,
          defer_values: bool = True, held=None) -> Plan:
    """`defer_values`: the NaN/Inf check of a weight that a measured choice reads anyway (lean.py,
    symmetry.py) is made on that read, not on one of its own before (refusals.refuse,
    _values_checked)."""
    scopes = list(iter_scopes(graph))
    ctx = PlanContext(graph, options, opset, overridable, planning, scopes, activations, calibration,
                      unchecked=set() if defer_values else None, held=held)
    candidates = []
    for site in collect_constants(graph, scopes):
        if site.onnx_dtype in FLOAT_TYPES:
            ctx.records[site.name] = records.float_record(site)
            candidates.append(Candidate(site, options))
    for stage in STAGES:
        candidates = stage(candidates, ctx)
        if ctx.again:
            return _plan(graph, planning, options, opset, overridable, activations, calibration, defer_values=False,
                         held=held)
    notes = refusals.selection_notes(options, ctx.records.values())
    return Plan(list(ctx.records.values()), opset, options.target, notes, importance=dict(ctx.symmetry.importance),
                details=ctx.details)
