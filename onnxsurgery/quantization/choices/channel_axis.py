"""Which axis a weight kept quantized per channel (`dq`) takes its scales along: the reader's
output channel by default, or any other axis of the weight whose scales lose less output
(issue 55). DequantizeLinear takes a scale per slice along any axis, so for a weight no scale
has to follow (kept before a Conv or a recurrent op, or passed into a Loop or Scan body as tf2onnx
passes a Keras LSTM's kernels, not fused into MatMulNBits) the axis is a free choice, measured per
weight:

- with --inputs, in the layer's output over them (measures.layer_cost);
- without, in the weight, each output channel's error weighted by the gain the next layer gives
  that channel (gain.py): the weight's error pushed through what reads it, as far as the
  weights alone say; uniform where no next layer is found.

silero-vad's STFT basis (258x1x256: cos and sin rows under a window that tapers each of the 256
taps) is the case: per output row the window's tails round coarsely; per tap (axis 2, 256
scales, as onnx-shrink-ray scales it) the weight error is 0.0033 against 0.0050, and on speech
streamed with the state carried (median relative L2 of the speech probabilities, that weight
alone quantized) 0.0022 against 0.0083 in the float16 export, 0.0024 against 0.0062 in the
If-less one. An axis is taken only where it loses less by AXIS_MARGIN (plans stay as they were
where the default's axis is about as good), and only axes of at least MIN_AXIS_CHANNELS
(a kernel's 3 taps make three coarse scales).

A lean Gemm weight read with transB (small enough to be kept before its Gemm) whose output a
normalization takes to the next layer is measured so too (`normalized_gemm`), its channels
weighted by the gain of the layer after the normalization (normalized_gain.py), and kept along
the axis that loses least where that is NORMALIZED_GEMM_MARGIN of its lean form's error:
oww_hey_jarvis' model.4 per input column (0.94x) and verifier_model.1 (0.78x).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...errors import InputError
from ...graph_utils import ConstantSite, read_values
from ...parallel import ordered_map
from ..axes import choose_axes
from ..calibration import Calibration
from ..lowerings.weight_readers import effective_readers
from ..chunked import all_finite
from ..options import Scheme
from ..quantize import quantize_site, scheme_args
from .candidate import Candidate
from .weights import balanced_rounding, lean_scheme, small_weight
from .gain import concentration_gains
from .measures import layer_cost
from .load_memory import KEPT_OPSET, conv_kept, fused_gemm, matmul_weight, transposed_gemm
from .normalized_gain import gains_through_norm

AXIS_MARGIN = 0.8  # another axis where its error is at most this share of the default axis's
LEAN_AXIS_MARGIN = 0.8  # DequantizeLinear along an axis, where its error is at most this share of the lean form's
# The same before a small Gemm read with transB whose output a normalization takes on (normalized_gemm): there
# the DequantizeLinear costs 0.02 ms a run and nothing at load (axis11: 0.259 against 0.240 ms, 0.978x against
# 0.980x the float model's memory), where before a Conv it runs the Conv's plain kernel (3.4-4.3x its CPU time)
NORMALIZED_GEMM_MARGIN = 0.95
MIN_AXIS_CHANNELS = 16
# Weights past this many elements keep the reader's output channels: balanced rounding along a
# short axis of a large weight moves values one group-round at a time (balanced.balance), and
# crepe_full's 8M-element Convs took 13 s to measure and 5 s to round (`quant` 3 s -> 21 s); the
# weights this stage is for (silero's STFT basis, 66K elements) are small.
MAX_AXIS_ELEMENTS = 1 << 20
# readers before which a DequantizeLinear per any axis is what the kept form is
FREE_AXIS_READERS = ("Conv", "ConvTranspose", "LSTM", "GRU", "RNN", "Slice", "Loop", "Scan")
# A weight read only by ConvTranspose ([C_in, C_out/group, k...]: its output channel is axis 1)
# takes another axis where it loses at most this share, lean.py's ARITH_AXIS_MARGIN: the
# DequantizeLinear runs whole before the reader, as a folded chain does, so any axis costs the
# same. lectura_hifigan's ups.0 (256x128x16) measures 0.85x per input channel (axis 0, as
# onnx-shrink-ray scales it), and that axis alone took the report set's worst relative L2 from
# 0.210 to 0.147 (tune 0.243 -> 0.230; paired draws in docs/quantization.md, vocoder14).
CONV_TRANSPOSE_AXIS_MARGIN = 0.9
# A weight kept before a Conv that reads one input channel (a filter bank over a raw signal: every
# tap sees the same samples, shifted) takes the axis that loses least by SIGNAL_CONV_AXIS_MARGIN:
# such filters taper along their taps as an STFT basis does (above), so per-tap scales follow what
# the rows share. crepe_tiny's conv1 (128x1x512x1) measures 1.1x less per tap (axis 2, as
# onnx-shrink-ray scales it); over 13 paired draws (bench/paired_draws.py, the shipped model and
# seeds 101-112) worst relative L2 tune 0.004514 -> 0.004386 (better on 12 of 13), report 0.005399 ->
# 0.005313 (8 of 13); 16 fresh samples at seeds 2000 / 3000 / 4000, worst 0.00596 / 0.00585 / 0.00559
# -> 0.00557 / 0.00556 / 0.00530 (ahead17). crepe_full's conv1 (1024 filters) measures less per
# output channel and stays so; the STFT bases took axis 2 at AXIS_MARGIN already.
SIGNAL_CONV_AXIS_MARGIN = 0.95


def choose_channel_axes(candidates: list[Candidate], activations: Calibration | None,
                        opset: int = KEPT_OPSET) -> list[Candidate]:
    """The candidates, those kept quantized per channel (`dq`) whose scales lose less along
    another axis with that axis (and a why that says so), and lean Conv weights that lose less
    as DequantizeLinear along some axis than in their lean form (`lean_axis_free`) so; the rest
    as they were."""
    free = [c for c in candidates if axis_free(c) or (opset >= KEPT_OPSET and lean_axis_free(c))]
    if not free:
        return candidates
    try:
        chosen = _measure(free, activations)
    except InputError:  # the inputs could not be generated or run: measure in the weights
        chosen = _measure(free, None)
    return [chosen.get(c.name, c) for c in candidates]


def lean_axis_free(c: Candidate) -> bool:
    """Whether `c` is a lean Conv weight (its lean form `scaled`: scales per output channel
    only) that could be DequantizeLinear before its Conv along any axis instead, as the memory
    rule keeps one (load_memory.conv_kept): measured against its lean form (module docstring)."""
    return (c.lowering == "lean" and not c.float16 and not small_weight(c.site) and c.options.lowering == "auto"
            and not c.options.four_bit and c.options.target != "tensorrt" and c.site.num_elements <= MAX_AXIS_ELEMENTS
            and (conv_kept(c.site) or normalized_gemm(c.site)) and lean_scheme(c.site, KEPT_OPSET)[1] == "scaled")


def normalized_gemm(site: ConstantSite) -> bool:
    """A Gemm weight read with transB, small enough to be kept before its Gemm
    (load_memory.transposed_gemm), whose output a normalization takes to the next layer
    (normalized_gain.py): its axis is measured against its lean form with those gains."""
    return transposed_gemm(site) and not fused_gemm(site) and gains_through_norm(site, 0) is not None


def axis_free(c: Candidate) -> bool:
    """Whether the axis of `c`'s scales is this stage's to choose (module docstring)."""
    readers = effective_readers(c.site)  # a 16-bit weight's: those behind its Casts (issue 55)
    return (c.site.num_elements <= MAX_AXIS_ELEMENTS
            and c.lowering == "dq" and not c.float16 and c.scheme.granularity == "channel" and not c.options.four_bit
            and c.options.target != "tensorrt" and c.options.lowering == "auto" and len(c.site.shape) >= 2
            and not matmul_weight(c.site) and bool(readers)
            and all(node.op in FREE_AXIS_READERS or _transposed_gemm(node) for node, _ in readers))


def _transposed_conv(site: ConstantSite) -> bool:
    """Whether every reader of `site` is a ConvTranspose (CONV_TRANSPOSE_AXIS_MARGIN)."""
    readers = effective_readers(site)
    return bool(readers) and all(node.op == "ConvTranspose" and index == 1 for node, index in readers)


def _signal_conv(site: ConstantSite) -> bool:
    """Whether every reader of `site` is a one-group Conv whose weight has one input channel
    (SIGNAL_CONV_AXIS_MARGIN)."""
    readers = effective_readers(site)
    return (len(site.shape) >= 3 and site.shape[1] == 1 and bool(readers)
            and all(node.op == "Conv" and index == 1 and node.attrs.get("group", 1) == 1 for node, index in readers))


def _transposed_gemm(node) -> bool:
    """A Gemm reading its B with transB=1: onnxruntime fuses no DequantizeLinear into it, so the
    kept weight's DequantizeLinear runs before it per any axis (load_memory.kept_in_memory)."""
    return node.op == "Gemm" and bool(node.attrs.get("transB", 0))


def _measure(free: list[Candidate], activations: Calibration | None) -> dict[str, Candidate]:
    if activations is not None:
        activations.plan([c.site for c in free])
    # weights measured together while they add up to no more than the largest one (parallel.py;
    # calibration's moments take a lock)
    largest = max(c.site.nbytes for c in free)
    measured = ordered_map(lambda c: _measured(c, activations), free, size=lambda c: c.site.nbytes, budget=largest)
    return {c.name: found for c, found in measured if found is not None}


def _measured(c: Candidate, activations: Calibration | None) -> Candidate | None:
    """`c` with the axis (or the kept form) its measure chooses, else None."""
    site = c.site
    values = read_values(site.tensor).astype(np.float32, copy=False)
    if not all_finite(values):
        return None  # the plan's NaN/Inf check refuses it (planner.py)
    moments = activations.moments(site) if activations is not None else None
    gains = None if moments is not None else _gains(site)
    cost = _cost(values, site, c, moments, gains)
    # what decided, as it was measured: a reader whose next layer is not found (a ConvTranspose,
    # a residual Add, a reshape) leaves every channel weighted alike, the plain weight error
    where = "in its layer's output on --inputs" if moments is not None else \
        "in the weight, weighted by the next layer's gain per channel" + (
            " (through the normalization its output goes into: gamma times the next weight)"
            if normalized_gemm(site) else "") if gains is not None else \
        "in the weight (no next layer's gain found behind its reader: every channel weighted alike)"
    if c.lowering == "lean":  # against the lean form: any axis, the output channels' too
        lean = cost(None)
        best = min(((cost(a), a) for a in range(values.ndim) if values.shape[a] >= MIN_AXIS_CHANNELS),
                   default=(lean, None))
        gemm = normalized_gemm(site)
        margin = NORMALIZED_GEMM_MARGIN if gemm else LEAN_AXIS_MARGIN
        if best[1] is not None and best[0] <= margin * lean and lean > 0:
            reader = "Gemm" if gemm else "Conv"
            why = (f"int8 per channel DequantizeLinear before the {reader} along axis {best[1]} "
                   f"({values.shape[best[1]]}), run at each inference, not the lean form: "
                   f"{lean / max(best[0], 1e-30):.1f}x less error {where}")
            return dataclasses.replace(c, scheme=Scheme("channel", best[1]), lowering="dq", reason=why)
        return None
    default = cost(c.scheme.axis)
    axes = [a for a in range(values.ndim) if a != c.scheme.axis and values.shape[a] >= MIN_AXIS_CHANNELS]
    best = min(((cost(a), a) for a in axes), default=(default, c.scheme.axis))
    margin = CONV_TRANSPOSE_AXIS_MARGIN if _transposed_conv(site) else \
        SIGNAL_CONV_AXIS_MARGIN if _signal_conv(site) else AXIS_MARGIN
    if best[0] <= margin * default and default > 0:
        why = (f"; scales along axis {best[1]} ({values.shape[best[1]]}), not the output channels: "
               f"{default / max(best[0], 1e-30):.1f}x less error {where}")
        return dataclasses.replace(c, scheme=Scheme("channel", best[1]), reason=(c.reason or "") + why)
    return None


def _gains(site: ConstantSite) -> np.ndarray | None:
    """Each output channel's gain in the next layer (gain.py, or normalized_gain.py behind a
    normalization); None where none is found (every channel then weighs alike)."""
    channel_axis = choose_axes(site)[0]
    return concentration_gains(site, channel_axis) if not normalized_gemm(site) else \
        gains_through_norm(site, channel_axis)


def _cost(values: np.ndarray, site: ConstantSite, c: Candidate, moments, gains: np.ndarray | None):
    """axis -> the error of per-channel int8 along it (symmetric, as the default's kept form
    rounds), by the measure the module docstring says (`gains`: _gains, where no moments)."""
    balance = balanced_rounding(site, c.options)
    channel_axis = choose_axes(site)[0]

    def cost(axis: int | None) -> float:
        """Per channel along `axis` as DequantizeLinear; None: the lean form (`scaled`, equalized)."""
        scheme = Scheme("channel", channel_axis if axis is None else axis)
        lowering = "scaled" if axis is None else "dq"
        qt = quantize_site(values, site, scheme, lowering, balance, scheme_args(c.options, scheme, lowering, True))
        if moments is not None:
            return layer_cost(values, qt, site, moments)
        error = np.moveaxis(qt.dequantize() - values, channel_axis, 0).reshape(values.shape[channel_axis], -1)
        per_channel = np.einsum("ij,ij->i", error, error, dtype=np.float64)
        return float(np.sqrt(per_channel @ (gains ** 2 if gains is not None else np.ones_like(per_channel))))
    return cost
