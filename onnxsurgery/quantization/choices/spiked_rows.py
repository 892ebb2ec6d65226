"""A weight whose output channels each hold one weight that is most of the channel: from the
weights alone, where the data-free measure of the lean form cannot see its loss (issue 55).

rembg's u2netp ("2258", a [64, 32, 3, 3] Conv): each active output channel holds one weight 17
standard deviations out (to -5.57, the rest within 0.16), the same input channel's centre tap in
every one; that weight is 97% of its channel's squared norm (the median channel). One scale per
output channel is set by it, and every other weight of the channel is rounded to a step or two.
Measured in the weight the spikes are the norm, so the lean form (input rows equalized, zero
points) errs 0.70x the accurate block chain's there (0.0045 against 0.0064) and nothing ranks it
lossy, yet in the model's output (its other weights meet the activations; the spikes' input
channel is quiet) it moved u2netp's masks 0.46 relative L2 on the zoo's report photos. Stored as
float16 (lean.py's SPIKED_* stage: one byte an element more than int8, 18 KB, one float copy at
load as the lean form's): 0.478 / 0.460 -> 0.0091 / 0.0298 (tune / report), against `--inputs`'
block chain 0.0437 / 0.0397.

Of every float Conv, MatMul and Gemm weight of 4,096 elements or more in the zoo's 91 models and
the bench's, only depthwise kernels (9-25 weights a channel: one tap is naturally most of it) and
2258 reach a median share of 0.5 with channels of MIN_ROW_ELEMENTS or more; 2258 alone reaches
0.6 (u2netp's next, 2297: 0.44; open_nsfw's 128x32 1x1: 0.64 is over 32 weights a channel).
"""

from __future__ import annotations

import numpy as np

# a channel's largest weight holds at least this share of the channel's squared L2 norm (the
# median over the channels that are not all zero)
SPIKE_SHARE = 0.9
# weights a channel (the product of the other axes): a depthwise or short kernel's few taps are
# naturally dominated by one of them
MIN_ROW_ELEMENTS = 64


def spike_share(values: np.ndarray, channel_axis: int) -> float:
    """The median over the non-zero output channels (along `channel_axis`) of the share of the
    channel's squared norm held by its largest weight; 0.0 for channels of fewer than
    MIN_ROW_ELEMENTS weights or none non-zero."""
    if values.ndim < 2 or values.size // max(values.shape[channel_axis], 1) < MIN_ROW_ELEMENTS:
        return 0.0
    rows = np.moveaxis(values, channel_axis, 0).reshape(values.shape[channel_axis], -1)
    energy = np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
    largest = np.abs(rows).max(axis=1).astype(np.float64) ** 2
    active = energy > 0
    if not active.any():
        return 0.0
    return float(np.median(largest[active] / energy[active]))


def spiked(share: float) -> bool:
    """Whether a weight of this spike_share is stored as float16 (SPIKE_SHARE)."""
    return share >= SPIKE_SHARE
