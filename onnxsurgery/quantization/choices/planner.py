"""From options to a plan: one record per float constant, every decision made here and nowhere
else (quantization/plan.py says what a record holds).

The default's rules live in the modules this one calls: rules.py (which weights, grouping,
lowering by consumer and opset, TensorRT's limits), lean.py (lean form or accurate
chain, small weights as float16), symmetry.py (symmetric or not). Planning reads weight
values only where a rule needs them (NaN checks, the measured choices) and writes nothing.

A plan read from a file is checked against the graph here too (`check_plan`): every record must
name a float constant of the model and ask for something its readers, the opset and the target
can take; the weights it does not list stay float.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...errors import PlanError
from ...graph_utils import ConstantSite, collect_constants, consumers, iter_scopes
from ...kv_cache import has_kv_cache
from ..axes import choose_axes
from ..calibration import Calibration
from ..estimates import quantized_bytes
from .int4_paths import forget_model_facts, matmulnbits_because
from .lean import choose_lean, small_weight
from .load_memory import (FIT_HOW, FIT_REASON, KEPT_OPSET, applies as memory_rule_applies,
                          float_weights_fit, fuses_into_nbits, kept_in_memory, kept_reason, kept_scheme,
                          machine_memory, room_at_load)
from ..lowerings import REGISTRY
from ..lowerings.tied import scheme_for as tied_scheme
from ..lowerings.scaled import scaled_before, zero_points_fit
from ..options import FLOAT_TYPES, QuantOptions, Scheme
from ..plan import Plan, WeightPlan
from .rules import (balanced_rounding, choose_scheme, decoder_nbits, float16_for_tensorrt, lean_forms, lean_scheme,
                    lowering_for, matches, refusal, site_options, tensorrt_refusal, value_refusal)
from .symmetry import SymmetryChoice, choose_symmetric


def plan_weights(graph: gs.Graph, options: QuantOptions, opset: int, keep: frozenset[str],
                 activations: Calibration | None = None, calibration: Calibration | None = None,
                 mapped: bool = False) -> Plan:
    """The plan for every float constant of `graph` (all scopes) under `options` at `opset`.
    `activations`: the inputs each weight's readers see, for auto's measured choices;
    `calibration`: GPTQ's inputs (the weights it can round get rounding `gptq`); `mapped`: the
    model's weights are in a data file, which onnxruntime maps (load_memory.py)."""
    forget_model_facts()  # of an earlier run on this graph
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # huge finite weights: see apply
        return _plan(graph, options, opset, keep, activations, calibration, mapped)


def _plan(graph, options: QuantOptions, opset: int, keep, activations, calibration, mapped: bool) -> Plan:
    scopes = list(iter_scopes(graph))
    records: dict[str, WeightPlan] = {}
    todo = []  # (site, scheme, lowering, as_fp16, why, opts) of the weights that change
    float16_instead, fallbacks = {}, []
    four_bit = options.as_four_bit() if options.int4_for else None
    qdq = any(node.op == "QuantizeLinear" for scope in scopes for node in scope.graph.nodes)
    for site in collect_constants(graph, scopes):
        if site.onnx_dtype not in FLOAT_TYPES:
            continue
        opts = site_options(site, options, four_bit)  # 4-bit for the weights allocated 4 bits
        no_quantized_form = float16_for_tensorrt(site, opts)
        reason = refusal(site, scopes, opts, keep, qdq) or value_refusal(site, float16_because=no_quantized_form)
        records[site.name] = _record(site, "float")
        if reason:
            records[site.name].why = f"below --min-elements ({opts.min_elements})" if reason == "small" else reason
            continue
        scheme = choose_scheme(site, opts)
        lowering = lowering_for(site, opts, scheme, opset)
        as_fp16 = site.onnx_dtype == onnx.TensorProto.FLOAT and matches(site, options.fp16_for)
        why = "allocated float16 by the budget" if as_fp16 else ""
        if opts.fp16 and not options.fp16:  # a per-weight rule's float16 (choices/int4_paths.py)
            as_fp16, why = True, opts.reason
        if no_quantized_form:
            float16_instead[site.name] = why = no_quantized_form
            as_fp16 = True
        if scheme.granularity != opts.granularity and lowering != "lean":
            fallbacks.append(site.name)
        todo.append((site, scheme, lowering, as_fp16, why, opts))
    room = None  # a cap on what the accurate chain spends at load (lean.py); None: its share alone
    sites = collect_constants(graph, scopes)
    if options.target != "tensorrt" and opset >= KEPT_OPSET and not float_weights_fit(sites, options.memory):
        todo = _keep_to_fit(todo, sites, options.memory)
    elif memory_rule_applies(graph, options) and opset >= KEPT_OPSET:
        todo = _keep_in_memory(todo, mapped)
        if mapped:  # the original's untouched table pages pay for nothing: the chain spends only what
            # the plan saves at load (all-MiniLM-L6-v2 with a data file: see load_memory.py)
            room = room_at_load(_planned(todo), mapped)
    elif options.lean_default and has_kv_cache(graph):  # nothing kept in memory to pay for the chain:
        # it spends only what the plan saves at load (SmolLM2-135M's optimum export, int8: 1.18x ->
        # 1.04x the float model's memory, top-1 97.1% -> 98.5% on held-out prompts)
        room = room_at_load(_planned(todo), mapped)
    lean_choice = choose_lean([(site, scheme) for site, scheme, lowering, *_ in todo if lowering == "lean"],
                              options, opset, total_bytes=sum(site.nbytes for site, *_ in todo),
                              activations=activations, room_at_load=room)
    symmetry = SymmetryChoice()
    if options.auto_symmetric:
        symmetry = choose_symmetric([(site, scheme, lowering, opts) for site, scheme, lowering, fp16, _, opts in todo
                                     if lowering not in ("lean", "scaled", "tied") and not fp16 and site.name
                                     not in lean_choice.half and not _decoder_nbits(site, lowering, opts)], activations)
    stays_float = bool(options.fp16 or options.levels)
    gptq_skipped: dict[str, str] = {}
    outcomes: dict[str, list[str]] = {}  # auto's lean-or-accurate choice: "lean" / "accurate" -> weights
    if calibration is not None and not stays_float:
        calibration.plan([site for site, _, _, fp16, _, _ in todo if not fp16 and site.name not in lean_choice.half])
        gptq_skipped = dict(calibration.skipped)
    for site, scheme, lowering, as_fp16, why, opts in todo:
        record = records[site.name]
        if as_fp16 or site.name in lean_choice.half or options.fp16:
            record.dtype, record.lowering = "float16", "cast"
            lossy = lean_choice.lossy.get(site.name)
            record.why = why or ("--fp16" if options.fp16 else
                                 f"float16: int8 per channel loses {lossy:.1f}x the accurate chain in its layer's "
                                 "output on --inputs, and the chain does not fit the memory budget" if lossy else
                                 "small: float16 costs little and is more accurate than int8 here")
        elif options.levels:
            record.lowering, record.levels = "levels", options.levels
            record.granularity, record.axis, record.block_size = scheme.granularity, scheme.axis, scheme.block_size
            record.why = f"--levels {options.levels}"
        else:
            outcome = _plan_integers(record, site, scheme, lowering, opts, options, opset, lean_choice, symmetry)
            if outcome:
                outcomes.setdefault(outcome, []).append(site.name)
            if calibration is not None:
                if site.name in gptq_skipped:
                    record.why += f"; no GPTQ: {gptq_skipped[site.name]}"
                else:
                    record.rounding = "gptq"
        record.bytes_after = planned_bytes(record, site)
    return Plan(list(records.values()), opset, options.target, _selection_notes(options, records.values()),
                importance=dict(symmetry.importance), details={
        "per_channel_instead_of_blocks": fallbacks,  # blocks asked for, no block size near it divides the axis
        "float16_for_tensorrt": float16_instead,
        "float16_small": sorted(set(lean_choice.half) - set(lean_choice.lossy)),  # auto: too small to be worth int8
        "float16_lossy": sorted(lean_choice.lossy),  # auto, --inputs: lossy as int8, the chain unaffordable
        "symmetric_chosen": sorted(symmetry.symmetric),  # --symmetric left to quant: measured more accurate
        "lean_asymmetric": sorted(lean_choice.asymmetric),  # lean weights measured better with zero points
        "not_calibrated": gptq_skipped,  # GPTQ asked for, weight -> why it keeps ordinary rounding
        # auto: lean (`scaled`: one float copy at load) or the accurate chain (choices/lean.py)
        "lean_lowering": outcomes.get("lean", []), "accurate_lowering": outcomes.get("accurate", []),
    })


def _planned(todo: list) -> list:
    """Each weight of `todo` with its lowering, `cast` for float16, a `lean` one's lean form
    (rules.lean_forms): what load_memory estimates."""
    return lean_forms((site, "cast" if fp16 else lowering) for site, _, lowering, fp16, *_ in todo)


def _keep_in_memory(todo: list, mapped: bool) -> list:
    """`todo` with the MatMul weights that load_memory keeps quantized in memory lowered as `dq`
    (`mapped`: see plan_weights)."""
    kept = {site.name for site in kept_in_memory(_planned(todo), left_lean=small_weight, mapped=mapped)}
    return [(site, kept_scheme(site), "dq", fp16, why, opts.changed(reason=kept_reason(site)))
            if site.name in kept else (site, scheme, lowering, fp16, why, opts)
            for site, scheme, lowering, fp16, why, opts in todo]


def _keep_to_fit(todo: list, sites, memory: int | None) -> list:
    """`todo` with every float32 weight planned in a form that turns float at load (lean, scaled,
    arith) lowered as `dq` per channel instead: the float weights would not fit where the model
    runs (load_memory.float_weights_fit). Weights the plan stores as float16 (small ones) keep
    their Cast: they are a small share of such a model."""
    from ...report import human_bytes

    size = human_bytes(sum(site.nbytes for site in sites if site.onnx_dtype in FLOAT_TYPES))
    where = human_bytes(machine_memory() if memory is None else memory)
    kept = []
    for site, scheme, lowering, fp16, why, opts in todo:
        if lowering in ("lean", "scaled", "arith") and not opts.four_bit and site.onnx_dtype == onnx.TensorProto.FLOAT:
            reason = FIT_REASON.format(how=FIT_HOW[fuses_into_nbits(site)], size=size, memory=where)
            kept.append((site, kept_scheme(site), "dq", False, reason, opts.changed(reason=reason)))
        else:
            kept.append((site, scheme, lowering, fp16, why, opts))
    return kept


def _selection_notes(options: QuantOptions, records) -> list[str]:
    """A selection that matches no weight (or every weight) says so: exit 0 with nothing
    quantized must not look like success. So do weights left alone as a quantized model's own
    data or as position tables, and a QDQ model's weights."""
    notes = []
    for kind, start in (("already quantized (scales and zero points of quantized ops)", "already quantized"),
                        ("rotary position tables", "a rotary position table"),
                        ("left float because the model quantizes its activations (QDQ; --include to quantize)",
                         "the model quantizes its activations")):
        count = sum(r.why.startswith(start) for r in records)
        if count:
            notes.append(f"{count} constant{'s' * (count != 1)} {kind}: left as they are")
    large = [r for r in records if not r.why.startswith("below --min-elements")]
    if options.include and large and all(r.why == "not matched by --include" for r in large):
        notes.append(f"--include {' '.join(options.include)} matched no weight")
    if options.exclude and large and all(r.why == "matched by --exclude" for r in large):
        notes.append(f"--exclude {' '.join(options.exclude)} matched every weight")
    return notes


def _plan_integers(record: WeightPlan, site: ConstantSite, scheme: Scheme, lowering: str, opts: QuantOptions,
                   options: QuantOptions, opset: int, lean_choice, symmetry: SymmetryChoice) -> str | None:
    """An integer record: the scheme and lowering the rules chose, symmetry settled. Returns
    auto's lean-or-accurate outcome for the weight ("lean", "accurate"), None where it had none."""
    outcome = None
    balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
    symmetric = site.name in symmetry.symmetric if options.auto_symmetric else opts.symmetric
    why = "the accurate block chain: the lean form loses most here" if lowering == "lean" else _why(lowering, opts)
    if lowering == "tied":  # int8 whatever the dtype asked (rules.lowering_for says why)
        scheme, symmetric, opts = tied_scheme(site), True, opts.changed(dtype="int8")
        if options.four_bit:
            why += "; int8, not 4-bit: kept 4-bit it was dequantized whole at every step"
    elif lowering == "lean" and site.name in lean_choice.accurate:
        lowering, outcome = "arith", "accurate"
    elif lowering in ("lean", "scaled"):  # --lowering scaled: lean for every weight
        scheme, lowering, outcome = *lean_scheme(site, opset), "lean"
        why = _why(lowering, opts, lean=True)
        if lowering == "scaled" and scaled_before(site, scheme.axis):
            why = "lean: one scale per input row, applied to the reader's data input (Attention)"
        if options.auto_symmetric:  # zero points where measured more accurate, or where asked for
            symmetric = site.name not in lean_choice.asymmetric
            why += "" if symmetric else "; zero points: measured more accurate"
        else:
            symmetric = opts.symmetric or not (lowering == "scaled" and zero_points_fit(site))
    elif _decoder_nbits(site, lowering, opts):
        symmetric = True  # lean_default: the symmetry was left to quant
        why += " (8 bits in a KV-cache decoder, symmetric blocks: rules.decoder_nbits)"
    elif options.auto_symmetric:
        why += "; symmetric: measured more accurate" if symmetric else ""
    record.dtype, record.lowering, record.symmetric = opts.dtype, lowering, bool(symmetric)
    record.granularity, record.block_size, record.axis = scheme.granularity, scheme.block_size, scheme.axis
    record.rounding = "balanced" if balance else "nearest"
    if opts.target == "onnxruntime" and not opts.four_bit and lowering not in ("matmulnbits", "tied_nbits"):
        why += "; not MatMulNBits: at 8 bits outside a KV-cache decoder, the lean form (rules.decoder_nbits)"
    record.why = opts.reason or why  # a per-weight rule's reason (choices/int4_paths.py) says it all
    return outcome


def _decoder_nbits(site: ConstantSite, lowering: str, opts: QuantOptions) -> bool:
    """Whether rules.decoder_nbits chose `lowering` for `site`: an 8-bit MatMulNBits of the int8 default."""
    return lowering == "matmulnbits" and not opts.four_bit and decoder_nbits(site, opts)


def _why(lowering: str, opts: QuantOptions, lean: bool = False) -> str:
    if opts.target == "tensorrt":
        return f"TensorRT reads it as {opts.dtype} DequantizeLinear"
    if lean:
        return {"scaled": "lean: one scale per output channel, applied after the reader",
                "dq": "no scale can follow its reader (recurrent, contrib op): DequantizeLinear, integers kept",
                "arith": "lean: one scale per channel (no reader takes the scale after it)",
                "embed_rows": "EmbedLayerNormalization's word table: int8 rows gathered for its ids"}[lowering]
    return {"gather": "embedding table: rows gathered, then dequantized",
            "matmulnbits": f"{matmulnbits_because(opts)}: MatMulNBits" if opts.lowering == "auto"
            else "--lowering matmulnbits",
            "dq": "kept quantized in memory (DequantizeLinear)",
            "dq_transposed": "kept quantized in memory, stored [K, N] for its Gemms without transB (fused into "
                             "MatMulNBits by onnxruntime)",
            "arith": "Cast -> Mul chain, folded at load" if opts.lowering == "auto" else "--lowering arith",
            "scaled": "--lowering scaled",
            "tied": "token table and lm_head in one: int8 rows gathered for the one, scaled after the other",
            "tied_nbits": "token table and lm_head in one table: MatMulNBits and GatherBlockQuantized share it"
            + ("" if opts.target == "onnxruntime" else " (the model already has com.microsoft ops)"),
            }.get(lowering, f"--lowering {lowering}")


def _record(site: ConstantSite, dtype: str) -> WeightPlan:
    return WeightPlan(name=site.name, consumers=sorted({n.op for n, _ in consumers(site)}), shape=list(site.shape),
                      dtype=dtype, bytes_before=site.nbytes, bytes_after=site.nbytes)


def planned_bytes(record: WeightPlan, site: ConstantSite) -> int:
    """The bytes `record` stores for `site` (plan.py's module doc)."""
    if record.dtype == "float16":
        return 2 * site.num_elements
    if record.dtype == "float":
        return site.nbytes
    scheme = Scheme(record.granularity, record.axis, record.block_size)
    return quantized_bytes(site, record.dtype, scheme, record.lowering,
                           not record.symmetric or record.dtype.startswith("u"))


# -- a plan from a file ---------------------------------------------------------------------------


def check_plan(graph: gs.Graph, records: list[WeightPlan], opset: int, keep: frozenset[str],
               target: str = "any", calibration: Calibration | None = None) -> Plan:
    """The plan `records` ask for, each checked against `graph` at `opset` (PlanError naming the
    weight otherwise), completed with the graph's facts (consumers, shape, bytes, axis where left
    out); float constants the records do not name stay float."""
    scopes = list(iter_scopes(graph))
    sites = {s.name: s for s in collect_constants(graph, scopes) if s.onnx_dtype in FLOAT_TYPES}
    given = {r.name: r for r in records}
    unknown = [name for name in given if name not in sites]
    if unknown:
        raise PlanError(f"plan weight '{unknown[0]}': the model has no float constant of that name")
    planned = []
    for name, site in sites.items():
        record = given.get(name)
        if record is None:
            planned.append(_record(site, "float"))
            planned[-1].why = "not in the plan"
            continue
        record.consumers, record.shape, record.bytes_before = (sorted({n.op for n, _ in consumers(site)}),
                                                               list(site.shape), site.nbytes)
        if record.changes:
            _check_record(site, record, scopes, opset, keep, target, calibration)
        record.bytes_after = planned_bytes(record, site)
        record.why = record.why or "from the plan"
        planned.append(record)
    return Plan(planned, opset, target)


def _check_record(site: ConstantSite, r: WeightPlan, scopes, opset: int, keep, target: str,
                  calibration: Calibration | None) -> None:
    def refuse(why: str):
        raise PlanError(f"plan weight '{r.name}': {why}")

    stand_in = QuantOptions(min_elements=1, target="any")  # what refusal() checks beyond the options
    reason = refusal(site, scopes, stand_in, keep)
    if reason:
        refuse(f"cannot be changed: {reason}")
    if r.dtype == "float16" and site.onnx_dtype != onnx.TensorProto.FLOAT:
        refuse("float16 storage is for float32 weights")
    if r.dtype == "float16":  # a Cast from float16: every target reads it
        return
    _check_axis(site, r, refuse)
    if r.lowering == "levels":
        return  # float values snapped in place: the graph is unchanged
    if r.granularity == "block" and site.shape[r.axis] % r.block_size:
        refuse(f"block_size {r.block_size} does not divide axis {r.axis} ({site.shape[r.axis]})")
    scheme = Scheme(r.granularity, r.axis, r.block_size)
    lowering = REGISTRY[r.lowering]
    why = lowering.fits(site, scheme, r.dtype, opset)
    if why:
        refuse(f"lowering {r.lowering} does not fit: {why}")
    if opset < lowering.min_opset(r.dtype, r.granularity):
        refuse(f"lowering {r.lowering} with {r.dtype}/{r.granularity} needs opset "
               f"{lowering.min_opset(r.dtype, r.granularity)}")
    if r.rounding == "gptq" and calibration is None:
        refuse("rounding gptq needs --calibration")
    if target == "tensorrt":
        trt = QuantOptions(dtype=r.dtype, target="tensorrt", symmetric=True, min_elements=1)
        why = tensorrt_refusal(site, trt) if r.dtype in ("int8", "int4") else f"TensorRT takes no {r.dtype} weights"
        if why is None and (r.lowering not in ("dq", "dq_equalized") or not r.symmetric):
            why = "TensorRT takes symmetric DequantizeLinear weights only"
        if why:
            refuse(why)


def _check_axis(site: ConstantSite, r: WeightPlan, refuse) -> None:
    """Fill in an axis left out (the consumer's, as the default chooses), check one given."""
    if r.granularity == "tensor":
        r.axis = None
        return
    if r.axis is None:
        channel_axis, block_axis = choose_axes(site)
        r.axis = block_axis if r.granularity == "block" else channel_axis
    if not -len(site.shape) <= r.axis < len(site.shape):
        refuse(f"axis {r.axis} is out of range for shape {list(site.shape)}")
    r.axis %= len(site.shape)


def plan_opset(records: list[WeightPlan]) -> int:
    """The opset the records' lowerings need (lowerings.base.Lowering.min_opset)."""
    return max((REGISTRY[r.lowering].min_opset(r.dtype, r.granularity) for r in records
                if r.lowering in REGISTRY), default=1)
