"""The last stage: each candidate written as its plan record (quantization/plan.py), once the measured
choices are made (lean.py: lean form, accurate chain or float16; symmetry.py: both read from the
PlanContext), with its `why` in words; and the bytes a record stores."""

from __future__ import annotations

from ...graph_utils import ConstantSite, consumers
from ..lowerings import quantized_bytes
from ..lowerings.scaled import scaled_before
from ..lowerings.zero_points import conv_zero_points_tried, zero_points_fit
from ..lowerings.tied import scheme_for as tied_scheme
from ..options import QuantOptions, Scheme
from ..plan import WeightPlan
from .candidate import Candidate, PlanContext
from .int4_paths import matmulnbits_because
from .weights import balanced_rounding, lean_scheme, stored_in_16_bits


def write(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The last stage: each candidate's record (`ctx.records`) as float16, --levels or integers,
    with GPTQ's rounding where it applies (`ctx.gptq_skipped`), its bytes, and the plan's figures
    of the measured choices (ctx.details)."""
    options, lean = ctx.options, ctx.lean
    outcomes: dict[str, list[str]] = {}  # auto's lean-or-accurate choice: "lean" / "accurate" -> weights
    for c in candidates:
        record = ctx.records[c.name]
        if c.float16 or c.name in lean.half or options.fp16:
            float16_record(record, c, options, lean.lossy.get(c.name), lean.sensitive.get(c.name),
                           lean.spiked.get(c.name))
        elif options.levels:
            levels_record(record, c, options)
        else:
            outcome = integer_record(record, c, options, ctx.opset, lean, ctx.symmetry)
            if outcome:
                outcomes.setdefault(outcome, []).append(c.name)
            if ctx.calibration is not None:
                if c.name in ctx.gptq_skipped:
                    record.why += f"; no GPTQ: {ctx.gptq_skipped[c.name]}"
                else:
                    record.rounding = "gptq"
        record.bytes_after = planned_bytes(record, c.site)
    ctx.details.update({
        # auto: too small to be worth int8
        "float16_small": sorted(set(lean.half) - set(lean.lossy) - set(lean.sensitive) - set(lean.spiked)),
        "float16_lossy": sorted(lean.lossy),  # auto, --inputs: lossy as int8, the chain unaffordable
        "float16_sensitive": sorted(lean.sensitive),  # auto: the next layer amplifies a few channels
        "float16_spiked": sorted(lean.spiked),  # auto: each output channel mostly one weight
        "symmetric_chosen": sorted(ctx.symmetry.symmetric),  # --symmetric left to quant: measured more accurate
        "lean_asymmetric": sorted(lean.asymmetric),  # lean weights measured better with zero points
        "not_calibrated": ctx.gptq_skipped,  # GPTQ asked for, weight -> why it keeps ordinary rounding
        # auto: lean (`scaled`: one float copy at load) or the accurate chain (choices/lean.py)
        "lean_lowering": outcomes.get("lean", []), "accurate_lowering": outcomes.get("accurate", []),
    })
    return candidates


def float_record(site: ConstantSite) -> WeightPlan:
    """The record of a weight left as it is (its `why` said by the caller)."""
    return WeightPlan(name=site.name, consumers=sorted({n.op for n, _ in consumers(site)}), shape=list(site.shape),
                      dtype="float", bytes_before=site.nbytes, bytes_after=site.nbytes)


def float16_record(record: WeightPlan, c: Candidate, options: QuantOptions, lossy: float | None,
                   sensitive: float | None = None, spiked: float | None = None) -> None:
    """`record` as float16 with a Cast back: the candidate's own reason, --fp16, or auto's
    (lean.py: `lossy`, int8's loss where that is why; `sensitive`, the next layer's gain
    concentration where that is; else a small weight)."""
    record.dtype, record.lowering = "float16", "cast"
    if stored_in_16_bits(c.site):  # already 16 bits: float16's analogue is leaving it (weights.HALF_TYPES)
        record.dtype, record.lowering = "float", None
    record.why = c.why or ("--fp16" if options.fp16 else
                           f"float16: the next layer reads a few of its output channels with {sensitive:.1f}x the "
                           "median gain, which amplifies their int8 rounding (choices/gain.py)" if sensitive else
                           f"float16: int8 per channel loses {lossy:.1f}x the accurate chain in its layer's "
                           "output on --inputs, and the chain does not fit the memory budget" if lossy else
                           f"float16: one weight holds {spiked:.0%} of each output channel (the median), which "
                           "sets the channel's int8 scale and rounds the rest coarsely (choices/spiked_rows.py)"
                           if spiked else "small: float16 costs little and is more accurate than int8 here")
    if record.dtype == "float":
        record.why = f"left in its 16 bits, where a float32 weight gets float16 ({record.why})"


def levels_record(record: WeightPlan, c: Candidate, options: QuantOptions) -> None:
    """`record` as --levels: float storage, values snapped per group."""
    record.lowering, record.levels = "levels", options.levels
    record.granularity, record.axis, record.block_size = c.scheme.granularity, c.scheme.axis, c.scheme.block_size
    record.why = f"--levels {options.levels}"


def integer_record(record: WeightPlan, c: Candidate, options: QuantOptions, opset: int, lean_choice,
                   symmetry) -> str | None:
    """`record` as integers: the scheme and lowering the stages chose, symmetry settled. Returns
    auto's lean-or-accurate outcome for the weight ("lean", "accurate"), None where it had none."""
    site, scheme, lowering, opts = c.site, c.scheme, c.lowering, c.options
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
        if site.name in lean_choice.axes:  # a lean `arith` weight's axis (lean.ARITH_AXIS_MARGIN)
            scheme = Scheme("channel", lean_choice.axes[site.name])
        why = _why(lowering, opts, lean=True)
        if site.name in lean_choice.axes:
            why += f"; scales along axis {scheme.axis} ({site.shape[scheme.axis]}): less error than per output channel"
        if site.name in lean_choice.input_form:  # lean per input channel (lean.INPUT_FORM_MARGIN)
            scheme, lowering = Scheme("channel", 1), "scaled_input"
            why = (f"lean: one scale per input channel ({site.shape[1]}) on the Conv's input, "
                   f"{lean_choice.input_form[site.name]:.2f}x less error than per output channel")
        if site.name in lean_choice.taps:  # arith per tap, zero points (tap_axis.py)
            scheme, lowering = Scheme("channel", lean_choice.taps[site.name][0]), "arith"
        if lowering == "scaled" and scaled_before(site, scheme.axis):
            why = "lean: one scale per input row, applied to the reader's data input (Attention)"
        if options.auto_symmetric:  # zero points where measured more accurate, or where asked for
            symmetric = site.name not in lean_choice.asymmetric
            why += "" if symmetric else "; zero points: measured more accurate"
            if symmetric and site.name in lean_choice.step_symmetric:
                why += "; symmetric: a KV-cache decoder's step, whose zero-point term would cost more than its MatMuls"
            if not symmetric and conv_zero_points_tried(site, lowering, options.four_bit):
                why += " (a convolution's: as a form only, its rank against the accurate chain stays symmetric's)"
        else:
            symmetric = opts.symmetric or not (lowering == "scaled" and zero_points_fit(site))
        if site.name in lean_choice.taps:
            why = (f"lean: one scale per tap ({site.shape[scheme.axis]} along axis {scheme.axis}) with zero points, "
                   f"Cast -> Sub -> Mul folded at load: {lean_choice.taps[site.name][1]:.2f}x less error than "
                   "the lean forms per channel (choices/tap_axis.py)")
    elif decoder_nbits_chosen(c):
        symmetric = True  # lean_default: the symmetry was left to quant
        why += " (8 bits in a KV-cache decoder, symmetric blocks: rules.decoder_nbits)"
    elif options.auto_symmetric:
        why += "; symmetric: measured more accurate" if symmetric else ""
        if site.name in symmetry.sampled:  # symmetry.py's quick sample, or sampling.py's
            why += "; symmetry measured on %d of %d channels" % symmetry.sampled[site.name]
    record.dtype, record.lowering, record.symmetric = opts.dtype, lowering, bool(symmetric)
    record.granularity, record.block_size, record.axis = scheme.granularity, scheme.block_size, scheme.axis
    record.rounding = "balanced" if balance else "nearest"
    if opts.target == "onnxruntime" and not opts.four_bit and lowering not in ("matmulnbits", "tied_nbits"):
        why += "; not MatMulNBits: at 8 bits outside a KV-cache decoder, the lean form (rules.decoder_nbits)"
    record.why = c.reason or why  # a per-weight rule's reason (forms.site_form, choices/int4_paths.py) says it all
    return outcome


def decoder_nbits_chosen(c: Candidate) -> bool:
    """Whether rules.decoder_nbits chose the candidate's lowering (rules.lower marks it): an
    8-bit MatMulNBits of the int8 default, unless kept in memory since (memory_at_load.py)."""
    return c.lowering == "matmulnbits" and c.decoder_nbits


def _why(lowering: str, opts: QuantOptions, lean: bool = False) -> str:
    if opts.target == "tensorrt":
        return f"TensorRT reads it as {opts.dtype} DequantizeLinear"
    if lean:
        return {"scaled": "lean: one scale per output channel, applied after the reader",
                "dq": "no scale can follow its reader (recurrent, contrib op): DequantizeLinear, integers kept",
                "arith": "lean: one scale per channel (no reader takes the scale after it)",
                "arith_equalized": "lean: one scale per output channel and the input equalized, folded at load "
                                   "(its readers compute in float16)",
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


def planned_bytes(record: WeightPlan, site: ConstantSite) -> int:
    """The bytes `record` stores for `site` (plan.py's module doc)."""
    if record.dtype == "float16":
        return 2 * site.num_elements
    if record.dtype == "float":
        return site.nbytes
    scheme = Scheme(record.granularity, record.axis, record.block_size)
    return quantized_bytes(site, record.dtype, scheme, record.lowering,
                           not record.symmetric or record.dtype.startswith("u"))
