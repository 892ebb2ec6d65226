"""How much a weight's quantized form changes its layer: in the layer's output over the inputs'
statistics where --inputs gave them, else in the weight itself. The measure the measured stages
share (lean.py, channel_axis.py, symmetry.py), kept here so that no stage imports another."""

from __future__ import annotations

import numpy as np

from ...graph_utils import ConstantSite
from ..axes import choose_axes
from ..gptq import output_energy, output_error
from ..rounding import Quantized, weight_error


def layer_cost(values: np.ndarray, qt: Quantized, site: ConstantSite, moments) -> float:
    """The L2 error in the layer's output over `moments`, or without them the weight's relative
    L2 error (only ever compared with the same weight's other cost)."""
    if moments is None:
        return weight_error(values, qt)["rel_l2_error"]
    channel_axis, block_axis = choose_axes(site)
    return output_error(values, qt, moments.total, channel_axis=channel_axis, block_axis=block_axis) ** 0.5


def layer_norm(values: np.ndarray, site: ConstantSite, moments) -> float:
    """What layer_cost divides by to be relative: the L2 norm of the layer's output over
    `moments`; 1 without them (layer_cost is relative already)."""
    if moments is None:
        return 1.0
    channel_axis, block_axis = choose_axes(site)
    return output_energy(values, moments.total, channel_axis=channel_axis, block_axis=block_axis) ** 0.5


# Two weights of the same shape whose measured ratios lie closer than this are a tie: rounding the
# weights to bfloat16 moved PP-OCRv6 rec's by 0.11-0.15% (conv2d_95 and conv2d_103, both 192x384
# 1x1: 1.6767 and 1.6740 as shipped, 1.6742 and 1.6759 in bf16), and which of the two a budget took
# flipped with it (issue 55). About twice that move: at 0.5%, SLANet+'s conv2d_20 / conv2d_16 (0.49%
# apart, a gap bf16 does not close) changed hands and lost on its report and fresh tables; among
# weights of the same size only, open_nsfw's 64x256 and 256x64 1x1 Convs (0.10%) did, 0.000436 ->
# 0.000461 on 16 fresh images: a squeeze and an expand are not twins.
TIE_MARGIN = 0.0025


def ranked(items: list, key, twin, margin: float = TIE_MARGIN) -> list:
    """`items` by `key`, largest first, but twins (the same `twin(item)`: a weight's shape) whose
    keys lie within `margin` of their run's largest in their own order (the graph's, which the
    weights' last bits do not move): a budget taking one of them takes the same one whatever the
    rounding. Other items are not reordered (which of them fits changes what else fits)."""
    position = {id(item): i for i, item in enumerate(items)}
    runs: list[list] = []
    for item in sorted(items, key=key, reverse=True):
        first = runs[-1][0] if runs else None
        if first is not None and twin(item) == twin(first) and key(item) >= key(first) * (1 - margin):
            runs[-1].append(item)
        else:
            runs.append([item])
    return [item for run in runs for item in sorted(run, key=lambda item: position[id(item)])]
