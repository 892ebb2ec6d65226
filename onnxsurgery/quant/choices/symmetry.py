"""`--symmetric` left to quant (symmetric None): each weight outside the lean lowering is
quantized both ways and keeps the one with the smaller error in its layer's output, measured on
the verification inputs (lean.layer_cost), or in the weight where they do not reach it.

Neither way wins everywhere. Asymmetric groups use all 2^bits levels over [min, max];
symmetric ones waste a level or more on a lopsided group, but their 4-bit ranges are searched
for a clipping ratio (rounding.CLIP_RATIOS) and they store no zero point. onnxruntime's 8-bit
symmetric blocks beat its asymmetric ones on ALBERT-base (issue 18: 0.0065 against 0.0168),
asymmetric 4-bit wins on ddddocr; a rule of thumb per model or per op gets one of them wrong."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import InputError
from ...graph_utils import ConstantSite, choose_axes, read_only_by, read_values
from ...progress import progress
from ..calibration import Calibration
from ..gptq import input_energy
from .lean import layer_cost
from ..options import QuantOptions, Scheme
from ..lowerings.scaled import ZERO_POINT_READERS
from ..quantize import quantize_site, scheme_args
from .rules import balanced_rounding

# Symmetric only where it beats asymmetric by 10% in the layer's output. With any margin, the
# choice measured on generated inputs made two real models' int4 output worse (ddddocr 0.159 ->
# 0.172, PP-OCRv4 rec 0.646 -> 0.652); with this one, int4 stays where asymmetric had it on
# both, and int8 blocks gain on rec (0.082 -> 0.062; ddddocr 0.0094 either way).
SYMMETRIC_MARGIN = 0.9


@dataclass
class SymmetryChoice:
    symmetric: set[str] = field(default_factory=set)  # more accurate symmetric, by SYMMETRIC_MARGIN
    # 4-bit weights: what each element multiplies in the layer's input (gptq.input_energy), which
    # weights their clipping search (schemes.scheme_args); measured here, reused by the pass
    importance: dict[str, np.ndarray] = field(default_factory=dict)


def weighted_clipping(site: ConstantSite) -> bool:
    """Whether a 4-bit weight's clipping search is weighted by its layer's input (scheme_args):
    MatMul and Gemm weights. Convolutions are not: on ddddocr's generated images it took its
    int4 output error from 0.159 to 0.211 (as with zero points: scaled.ZERO_POINT_READERS)."""
    return read_only_by(site, ZERO_POINT_READERS)


def choose_symmetric(candidates: list[tuple[ConstantSite, Scheme, str, QuantOptions]],
                     activations: Calibration | None = None) -> SymmetryChoice:
    """Among `candidates` (site, scheme, lowering, the site's options), the weights more accurate
    symmetric, by SYMMETRIC_MARGIN, each form measured as the pass will quantize it."""
    if not candidates:
        return SymmetryChoice()
    try:
        return _choose(candidates, activations)
    except InputError:  # the inputs could not be generated or run: measure in the weights
        return _choose(candidates, None)


def _choose(candidates, activations: Calibration | None) -> SymmetryChoice:
    if activations is not None:
        activations.plan([site for site, *_ in candidates])
    chosen = SymmetryChoice()
    for site, scheme, lowering, options in progress(candidates, "measure symmetric vs asymmetric", unit="weight"):
        values = read_values(site.tensor).astype(np.float32, copy=False)
        balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
        moments = activations.moments(site) if activations is not None else None
        importance = None
        if moments is not None and options.four_bit and weighted_clipping(site):
            channel_axis, block_axis = choose_axes(site)
            importance = chosen.importance[site.name] = input_energy(
                moments.total, tuple(site.shape), channel_axis=channel_axis, block_axis=block_axis)
        symmetric, asymmetric = (
            layer_cost(values, quantize_site(values, site, scheme, lowering, balance,
                                             scheme_args(options, scheme, lowering, sym, importance)), site, moments)
            for sym in (True, False))
        if symmetric <= SYMMETRIC_MARGIN * asymmetric:
            chosen.symmetric.add(site.name)
    return chosen
