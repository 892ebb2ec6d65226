"""auto's measured choice, per int8 weight, between its lean form (one float copy at load or
none) and the accurate block chain (four float copies at load), under a memory budget."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..graph_utils import ConstantSite, choose_axes, read_values
from ..progress import progress
from .calibration import Calibration
from .gptq import output_error
from .options import QuantOptions, Scheme
from .rounding import Quantized, weight_error
from .schemes import balanced_rounding, lean_scheme, quantize_site, scheme_args

# `auto` (int8) lowers every weight lean (one scale per output channel, input rows equalized:
# scaled.py) and spends a memory budget on the accurate block chain for the weights that
# lose most by it: those whose lean error, measured in the layer's output on the verification
# inputs, is more than MIN_ACCURATE_RATIO times the block scheme's, most lossy first, while the
# float copies the chain holds at load beyond the lean one fit in ACCURATE_MEMORY_SHARE of the
# float bytes of all the weights quantized. Measured on the bench's four models: a share of
# 0.35 took ALBERT-base to 1.06x the float original's memory, 0.2 keeps it at 0.99x.
MIN_ACCURATE_RATIO = 2.0
ACCURATE_MEMORY_SHARE = 0.2


def choose_accurate(candidates: list[tuple[ConstantSite, Scheme]], options: QuantOptions, opset: int,
                     total_bytes: int, activations: Calibration | None = None) -> set[str]:
    """The lean candidates that get the accurate block chain instead (MIN_ACCURATE_RATIO and
    ACCURATE_MEMORY_SHARE above): each weight is quantized both ways to measure its errors, in
    the layer's output over `activations` where they cover the weight (what its readers
    multiply it by), else in the weight itself."""
    try:
        scored = lean_costs(candidates, options, opset, activations)
    except InputError:  # the inputs could not be generated or run: measure in the weights
        scored = lean_costs(candidates, options, opset, None)
    budget, chosen = ACCURATE_MEMORY_SHARE * total_bytes, set()
    for ratio, extra, name in sorted(scored, reverse=True):
        if ratio > MIN_ACCURATE_RATIO and extra <= budget:
            chosen.add(name)
            budget -= extra
    return chosen


def lean_costs(candidates: list[tuple[ConstantSite, Scheme]], options: QuantOptions, opset: int,
                activations: Calibration | None) -> list[tuple[float, int, str]]:
    """(lean error / accurate error, extra bytes the accurate chain holds at load, name) per
    candidate. Measured in the weight, a weight error far from the readers' large inputs counts
    as much as one next to them; PP-OCRv4 rec's conv2d_170 (240x240) loses 1.6x in the weight
    and 6.6x in the layer output, and it is the one that costs the model's output most."""
    if activations is not None:
        activations.plan([site for site, _ in candidates])
    scored = []
    for site, scheme in progress(candidates, "measure lean vs accurate", unit="weight"):
        values = read_values(site.tensor).astype(np.float32, copy=False)
        balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
        lean, lowering = lean_scheme(site, opset)
        moments = activations.moments(site) if activations is not None else None
        lean_error, accurate_error = (
            layer_cost(values, quantize_site(values, site, sch, low, balance, scheme_args(options, sch, low, sym)),
                  site, moments)
            for sch, low, sym in ((lean, lowering, True), (scheme, "arith", None)))
        ratio = lean_error / accurate_error if accurate_error > 0 else 1.0
        # float copies held at load beyond the lean form's: blocks fold Cast, Sub, Mul and
        # Reshape (four); `scaled` folds one Cast, lean `arith` Cast and Mul (two), `dq` none
        extra = 4 * site.num_elements * {"scaled": 3, "arith": 2, "dq": 4}[lowering]
        scored.append((ratio, extra, site.name))
    return scored


def layer_cost(values: np.ndarray, qt: Quantized, site: ConstantSite, moments) -> float:
    """The L2 error in the layer's output over `moments`, or without them the weight's relative
    L2 error (only ever compared with the same weight's other cost)."""
    if moments is None:
        return weight_error(values, qt)["rel_l2_error"]
    channel_axis, block_axis = choose_axes(site)
    return output_error(values, qt, moments.total, channel_axis=channel_axis, block_axis=block_axis) ** 0.5

