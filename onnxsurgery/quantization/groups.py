"""A quantization group's arrays shaped to broadcast: a scale (or zero point) back to the
tensor's shape, and a tensor viewed in its blocks beside its scales, without full-size copies."""

from __future__ import annotations

import numpy as np


def expand(scale: np.ndarray, shape, granularity: str, axis: int | None, block_size: int | None) -> np.ndarray:
    """Broadcast a scale (or zero point) back to the full tensor shape."""
    if granularity == "tensor":
        return scale
    if granularity == "channel":
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return scale.reshape(view)
    return np.repeat(scale, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def grouped(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, granularity: str, axis: int | None,
             block_size: int | None):
    """x, scale and zero shaped so that they broadcast without materialising full-size
    scale arrays (blocks: x viewed as [..., nblocks, block, ...])."""
    if granularity == "tensor":
        return x, scale, zero
    if granularity == "channel":
        view = [1] * x.ndim
        view[axis] = x.shape[axis]
        return x, scale.reshape(view), zero.reshape(view)
    n = x.shape[axis]
    if n % block_size:  # ragged last block: expand (rare; the pass avoids it)
        return (x, expand(scale, x.shape, granularity, axis, block_size),
                expand(zero, x.shape, granularity, axis, block_size))
    blocked = list(x.shape)
    blocked[axis:axis + 1] = [n // block_size, block_size]
    s_shape = list(x.shape)
    s_shape[axis:axis + 1] = [n // block_size, 1]
    return x.reshape(blocked), scale.reshape(s_shape), zero.reshape(s_shape)
