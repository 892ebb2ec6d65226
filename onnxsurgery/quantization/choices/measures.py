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
