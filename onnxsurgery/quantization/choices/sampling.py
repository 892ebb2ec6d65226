"""A large weight measured in the weight is measured on a sample of its output channels: what
choices/lean.py, choices/symmetry.py and choices/tensorrt_float16.py quantize several ways to
compare."""

from __future__ import annotations

import numpy as np

from ...graph_utils import ConstantSite
from ..axes import choose_axes

# Measured in the weight, a weight of SAMPLE_FROM_ELEMENTS or more is measured on about
# SAMPLED_ELEMENTS of it, whole output channels evenly spaced (at least MIN_SAMPLED_CHANNELS):
# quantizing every weight three ways was 60% of `quant --no-verify` on a 2.7 GB model
# (bench/scale.py). Every form groups within a channel, so a channel's errors are its own; only
# the input-row equalization's row maxima are taken over the sample. No weight of the accuracy
# bench's transformers is that large (ALBERT's largest: 2.4M elements).
SAMPLE_FROM_ELEMENTS = 1 << 22
SAMPLED_ELEMENTS = 1 << 20
MIN_SAMPLED_CHANNELS = 256


def channel_sample(values: np.ndarray, site: ConstantSite) -> np.ndarray:
    """`values`, or evenly spaced whole output channels of it where it is large (see above)."""
    picked = sampled_channels(values, site)
    return values if picked is None else np.take(values, picked, axis=choose_axes(site)[0])


def sampled_channels(values: np.ndarray, site: ConstantSite) -> np.ndarray | None:
    """The output channels `channel_sample` keeps (along choose_axes(site)[0]), or None: all."""
    channel_axis, block_axis = choose_axes(site)
    if values.size < SAMPLE_FROM_ELEMENTS or channel_axis == block_axis:
        return None
    channels = values.shape[channel_axis]
    count = max(MIN_SAMPLED_CHANNELS, SAMPLED_ELEMENTS * channels // values.size)
    if count * 2 > channels:
        return None
    return np.linspace(0, channels - 1, count).round().astype(np.int64)


def sample_like(array: np.ndarray | None, values: np.ndarray, picked: np.ndarray | None, axis: int):
    """`array` (which broadcasts against `values`) cut to the channels `picked` along `axis` where
    it has them."""
    if array is None or picked is None or np.ndim(array) != values.ndim or np.shape(array)[axis] == 1:
        return array
    return np.take(array, picked, axis=axis)
