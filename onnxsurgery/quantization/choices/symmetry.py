"""`--symmetric` left to quant (symmetric None): each weight outside the lean lowering is
quantized both ways and keeps the one with the smaller error in its layer's output, measured on
the verification inputs (measures.layer_cost), or in the weight where they do not reach it: there, a
weight of sampling.SAMPLE_FROM_ELEMENTS or more on a sample of its output channels, as lean.py
measures (4-bit's clipping search of both ways over every element of a 1.36B decoder was most of
`quant --dtype int4`; every group lies within a channel, so a channel's errors are its own).

Neither way wins everywhere. Asymmetric groups use all 2^bits levels over [min, max];
symmetric ones waste a level or more on a lopsided group, but their 4-bit ranges are searched
for a clipping ratio (clip_search.CLIP_RATIOS) and they store no zero point. onnxruntime's 8-bit
symmetric blocks beat its asymmetric ones on ALBERT-base (issue 18: 0.0065 against 0.0168),
asymmetric 4-bit wins on ddddocr; a rule of thumb per model or per op gets one of them wrong."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import InputError
from ...parallel import WORKERS
from ...graph_utils import ConstantSite, constant_values, read_only_by, read_values
from ..held_roundings import measuring_walk
from ..axes import choose_axes
from ...progress import progress
from ..calibration import Calibration
from ..chunked import all_finite
from ..gptq import energy_layout, input_energy
from .measures import layer_cost
from ..lowerings.weight_readers import effective_readers
from ..lowerings.zero_points import ZERO_POINT_READERS
from ..quantize import keep_whole, quantize_site, scheme_args
from .candidate import Candidate
from .weights import balanced_rounding
from .sampling import sample_like, sampled_channels

# Symmetric only where it beats asymmetric by 10% in the layer's output. With any margin, the
# choice measured on generated inputs made two real models' int4 output worse (ddddocr 0.159 ->
# 0.172, PP-OCRv4 rec 0.646 -> 0.652); with this one, int4 stays where asymmetric had it on
# both, and int8 blocks gain on rec (0.082 -> 0.062; ddddocr 0.0094 either way).
SYMMETRIC_MARGIN = 0.9

# Each weight is measured first on about QUICK_ELEMENTS of it, whole output channels evenly
# spaced (at least QUICK_MIN_CHANNELS, at most half of what would be measured otherwise). Where
# symmetric's cost there lies farther from SYMMETRIC_MARGIN times asymmetric's than the sample's
# spread (QUICK_SPREAD: on the layer's inputs, or in the weight), that decides; closer calls
# are measured as before (whole, or sampling.py's sample), so they are decided as before. Both
# ways' clipping search over every element of every int4 weight was 4.4 of 15.7 s CPU of
# `quant --dtype int4` on a 1.2 GB decoder, 6.8 of 14.3 s with --inputs on a 359 MB encoder.
# Every group lies within a channel, so a channel's errors are its own: the sample's cost
# ratio is the whole's, but for the channels left out. Measured on the zoo's transformers, the
# encoder and the decoder (int4, in the weight and on --inputs): the ratio on 128-170 of 384-1536
# channels was within 2.2% of the whole's in the weight, within 19-27% in the layer's output on
# real inputs (a few channels carry most of that error), and no call the sample made differed
# from the whole's. The plan's `why` says where a decision was made on a sample.
QUICK_ELEMENTS = 1 << 17
QUICK_MIN_CHANNELS = 128
QUICK_SPREAD = {"layer": 0.15, "weight": 0.05}


@dataclass
class SymmetryChoice:
    symmetric: set[str] = field(default_factory=set)  # more accurate symmetric, by SYMMETRIC_MARGIN
    # 4-bit weights: what each element multiplies in the layer's input (gptq.input_energy), which
    # weights their clipping search (schemes.scheme_args); measured here, reused by the pass
    importance: dict[str, np.ndarray] = field(default_factory=dict)
    finite: set[str] = field(default_factory=set)  # read whole to be measured, with no NaN or Inf
    not_finite: set[str] = field(default_factory=set)  # read to be measured: NaN or Inf (not measured)
    # measured on a sample: (output channels measured, of how many), for the plan's `why`
    sampled: dict[str, tuple[int, int]] = field(default_factory=dict)


def weighted_clipping(site: ConstantSite) -> bool:
    """Whether a 4-bit weight's clipping search is weighted by its layer's input (scheme_args):
    MatMul and Gemm weights. Convolutions are not: on ddddocr's generated images it took its
    int4 output error from 0.159 to 0.211 (as with zero points: zero_points.ZERO_POINT_READERS)."""
    return read_only_by(site, ZERO_POINT_READERS, effective_readers(site))  # a 16-bit one's: behind its Casts


# Normalization ops whose output a MatMul/Gemm reads: data, scale (gamma), bias (beta) inputs.
NORMALIZATIONS = {"LayerNormalization": (1, 2), "SkipLayerNormalization": (2, 3),
                  "SimplifiedLayerNormalization": (1, None), "RMSNormalization": (1, None),
                  "SkipSimplifiedLayerNormalization": (2, None)}


def normalized_input_energy(site: ConstantSite) -> np.ndarray | None:
    """The mean square of each input channel of the layer reading `site`, from the weights alone,
    where every reader reads a normalization's output: a normalized token has zero mean and
    unit variance over its channels, so channel k carries about gamma_k^2 + beta_k^2 (a
    decomposed LayerNorm's Mul by gamma then Add of beta counts too). None elsewhere (a GELU's
    or an attention's output: nothing in the weights says how large it is). Without it, 4-bit
    clipping on transformers measured on real sentences: MiniLM 0.227 -> 0.242, ALBERT's encoder
    0.227 -> 0.255 (bench/defaults.py)."""
    energies = []
    for node, _ in effective_readers(site):
        energy = _normalized_energy(node.inputs[0])
        if energy is None:
            return None
        energies.append(energy)
    if not energies or len({e.shape for e in energies}) != 1:
        return None
    return np.mean(energies, axis=0)


def _normalized_energy(data) -> np.ndarray | None:
    producer = data.inputs[0] if getattr(data, "inputs", None) else None
    if producer is None:
        return None
    gamma = beta = None
    if producer.op in NORMALIZATIONS:
        g, b = NORMALIZATIONS[producer.op]
        gamma = _constant(producer.inputs, g)
        beta = _constant(producer.inputs, b) if b is not None else None
    elif producer.op == "Add":  # decomposed: (normalized * gamma) + beta
        beta = next((constant_values(t) for t in producer.inputs if constant_values(t) is not None), None)
        mul = next((t.inputs[0] for t in producer.inputs if constant_values(t) is None and t.inputs), None)
        if mul is not None and mul.op == "Mul":
            gamma = next((constant_values(t) for t in mul.inputs if constant_values(t) is not None), None)
    if gamma is None or gamma.ndim != 1 or (beta is not None and beta.shape != gamma.shape):
        return None
    if gamma.size == 1:  # a scalar scale (a transformer's embedding * sqrt(d) + positions): no per-channel gamma
        return None
    energy = gamma.astype(np.float32) ** 2
    return energy + beta.astype(np.float32) ** 2 if beta is not None else energy


def _constant(inputs, index: int) -> np.ndarray | None:
    return constant_values(inputs[index]) if index < len(inputs) else None


def quick_channels(values: np.ndarray, site: ConstantSite, picked: np.ndarray | None) -> np.ndarray | None:
    """The output channels measured first (QUICK_ELEMENTS), or None where they would be more than
    half of what is measured otherwise (`picked`, None: every channel)."""
    channel_axis, block_axis = choose_axes(site)
    if channel_axis == block_axis or values.ndim < 2:
        return None
    channels = values.shape[channel_axis]
    measured = channels if picked is None else picked.size
    count = max(QUICK_MIN_CHANNELS, QUICK_ELEMENTS * channels // max(values.size, 1))
    if count * 2 > measured:
        return None
    return np.linspace(0, channels - 1, count).round().astype(np.int64)


def choose_symmetric(candidates: list[Candidate], activations: Calibration | None = None,
                     held=None) -> SymmetryChoice:
    """Among `candidates` (each with its scheme, lowering and options), the weights more accurate
    symmetric, by SYMMETRIC_MARGIN, each form measured as the pass will quantize it. `held`
    (held_roundings.HeldRoundings): where given, the way chosen is rounded whole there for the pass."""
    if not candidates:
        return SymmetryChoice()
    try:
        return _choose(candidates, activations, held)
    except InputError:  # the inputs could not be generated or run: measure in the weights
        return _choose(candidates, None, held)


def _choose(candidates, activations: Calibration | None, held=None) -> SymmetryChoice:
    if activations is not None:
        activations.plan([c.site for c in candidates])
    chosen = SymmetryChoice()

    def measure(candidate: Candidate) -> tuple[bool | None, np.ndarray | None, tuple[int, int] | None]:
        """(symmetric is chosen, the importance its rounding weighs by, (channels measured, of
        how many) where a sample was); None: the weight holds NaN or Inf (the plan's check, on
        this read: planner.py)."""
        site, scheme, lowering, options = candidate.site, candidate.scheme, candidate.lowering, candidate.options
        values = read_values(site.tensor).astype(np.float32, copy=False)
        if not all_finite(values):
            return None, None, None
        balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
        moments = activations.moments(site) if activations is not None else None
        importance = None
        if options.four_bit and weighted_clipping(site):
            channel_axis, block_axis = choose_axes(site)
            if moments is not None:
                importance = input_energy(moments.total, tuple(site.shape), channel_axis=channel_axis,
                                          block_axis=block_axis)
            else:  # no inputs that reach it: what the weights say its input is, where they say it
                energy = normalized_input_energy(site)
                importance = None if energy is None else energy_layout(energy, tuple(site.shape),
                                                                       channel_axis=channel_axis, block_axis=block_axis)
        channel_axis = choose_axes(site)[0]

        def costs(picked):
            """(symmetric's cost, asymmetric's) on the channels `picked` (None: all)."""
            measured = values if picked is None else np.take(values, picked, axis=channel_axis)
            weighed = sample_like(importance, values, picked, channel_axis)
            sample_of = None if picked is None else (values, picked, channel_axis)  # its picks kept for the pass
            return tuple(layer_cost(measured, quantize_site(measured, site, scheme, lowering, balance,
                                                            scheme_args(options, scheme, lowering, sym, weighed),
                                                            sample_of=sample_of), site, moments)
                         for sym in (True, False))

        def kept(symmetric: bool) -> bool:
            """The pass's rounding of the way chosen, made on this read (issue 58: held_roundings)."""
            keep_whole(values, site, scheme, lowering, balance, scheme_args(options, scheme, lowering, symmetric,
                                                                              importance), held)
            return symmetric

        # today's measurement: the whole weight, or without moments a large one's sample (sampling.py)
        picked = sampled_channels(values, site) if moments is None else None
        quick = quick_channels(values, site, picked)
        if quick is not None:  # a clear call on a few channels stands (QUICK_ELEMENTS)
            symmetric, asymmetric = costs(quick)
            margin, spread = SYMMETRIC_MARGIN * asymmetric, 1 + QUICK_SPREAD["weight" if moments is None else "layer"]
            if symmetric * spread <= margin or symmetric >= margin * spread:
                return kept(symmetric <= SYMMETRIC_MARGIN * asymmetric), importance, (quick.size,
                                                                                      values.shape[channel_axis])
        symmetric, asymmetric = costs(picked)
        sampled = None if picked is None else (picked.size, values.shape[channel_axis])
        return kept(symmetric <= SYMMETRIC_MARGIN * asymmetric), importance, sampled

    # weights measured together while they add up to no more than the largest one (parallel.py;
    # calibration's moments take a lock)
    # walked last first where nothing is held (held_roundings.measuring_walk), results in order
    largest = max(c.site.nbytes for c in candidates)
    measured = measuring_walk(held)(measure, candidates, size=lambda c: c.site.nbytes, budget=largest, workers=WORKERS)
    for candidate, (symmetric, importance, sampled) in progress(measured, "measure symmetric vs asymmetric",
                                                       total=len(candidates), unit="weight"):
        if symmetric is None:
            chosen.not_finite.add(candidate.name)
            continue
        chosen.finite.add(candidate.name)
        if importance is not None:
            chosen.importance[candidate.name] = importance
        if sampled is not None:
            chosen.sampled[candidate.name] = sampled
        if symmetric:
            chosen.symmetric.add(candidate.name)
    return chosen
