"""Quantize and dequantize arrays in numpy: the arithmetic behind `quant`, kept apart from the
graph so that it can be checked against a plain reference.

Conventions follow ONNX DequantizeLinear: x = (q - zero_point) * scale, with q an integer of
the target type; per tensor, per channel along `axis`, or per block of `block_size` elements
along `axis`. An all-zero (or constant) channel gets scale 1 instead of 0, so no NaN appears.

Scales can be stored as float16 (`half_scales`): each is rounded up to a float16 value first
and the integers are computed against that rounded scale, so the only error left is the
integers' own rounding; the scale's storage costs nothing in accuracy. Used when every scale is
a normal float16 (2^-14 .. 65504); otherwise float32.

Balanced rounding (`balanced`; balanced.py): round to nearest, then move the fewest values of
each group one step (those whose exact value lies nearest the halfway point) so that the group's rounding
errors sum to zero (within half a step). Plain rounding leaves each group a small random error
sum; a layer whose inputs share a common offset (non-negative activations after ReLU or
hardswish, as in convolutional networks) turns that sum into a systematic shift of its output.
Each value stays within one step of its exact value.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from . import balanced as balanced_rounding
from .scales import scales_for_ranges
from .chunked import block_ranges, channel_ranges, error_sums, round_to_grid
from .clip_search import CLIP_RATIOS, _clip_ranges, _clip_rest
from .groups import grouped as _grouped

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int4": (-8, 7), "uint4": (0, 15)}


@dataclass
class Quantized:
    q: np.ndarray  # integer values (int8/uint8 arrays also for 4-bit types), shape of the input
    scale: np.ndarray  # float32 or float16; shape: () per tensor, [d_axis] per channel, blocked for blocks
    zero_point: np.ndarray | None  # same shape as scale, integer; None when symmetric
    dtype: str
    granularity: str
    axis: int | None
    block_size: int | None
    # The `scaled` lowering's input-side scale: the weight was divided by it along input_axis
    # before quantizing, and the graph multiplies the reader's input by it (scaled.py)
    input_scale: np.ndarray | None = None
    input_axis: int | None = None
    # `search_clip`'s pick per group (an index into CLIP_RATIOS), which `clip_picks` takes again
    clip_picks: np.ndarray | None = field(default=None, compare=False, repr=False)
    # quantize.quantize_site's record of this weight's measurements (quantize.remembering)
    remembered: object = field(default=None, compare=False, repr=False)
    # each group's (min, max) before any clipping, which `ranges` takes again
    ranges: tuple | None = field(default=None, compare=False, repr=False)
    # error_sums' figures, measured as the weight was rounded, and the array they are against
    sums: tuple | None = field(default=None, compare=False, repr=False)

    def dequantize(self) -> np.ndarray:
        return dequantize(self)


def _reduce_shape(shape: tuple[int, ...], granularity: str, axis: int | None, block_size: int | None):
    """Shape of the scale array for a given scheme."""
    if granularity == "tensor":
        return ()
    if granularity == "channel":
        return (shape[axis],)
    blocked = list(shape)
    blocked[axis] = -(-shape[axis] // block_size)
    return tuple(blocked)


def _ranges(x: np.ndarray, granularity: str, axis: int | None, block_size: int | None):
    """min and max of x per quantization group, in the scale's shape."""
    if granularity == "tensor":
        return x.min(), x.max()
    if granularity == "channel":
        return channel_ranges(x, axis)
    n = x.shape[axis]
    nblocks = -(-n // block_size)
    pad = nblocks * block_size - n
    if pad:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, pad)
        x = np.pad(x, widths, mode="edge")  # repeats an existing value: ranges unchanged
    shape = list(x.shape)
    shape[axis:axis + 1] = [nblocks, block_size]
    return block_ranges(x.reshape(shape), axis + 1)


def quantize(
    x: np.ndarray,
    *,
    dtype: str = "int8",
    granularity: str = "channel",
    axis: int | None = 0,
    block_size: int | None = None,
    symmetric: bool = True,
    levels: int | None = None,
    half_scales: bool = False,
    balanced: bool = False,
    search_clip: bool = False,
    importance: np.ndarray | None = None,
    divisor: np.ndarray | None = None,
    clip_picks: np.ndarray | None = None,
    known_picks: tuple[int, np.ndarray, np.ndarray] | None = None,
    ranges: tuple[np.ndarray, np.ndarray] | None = None,
    error: bool = True,
) -> Quantized:
    """Round-to-nearest quantization of a float array. Ranges and scales are computed in
    float64 (they are small); the rounding runs in float32 on broadcast views, so memory stays
    near one float32 copy of the tensor. `levels` asks for that many evenly spaced values per
    group instead of an integer type's range; `half_scales` stores scales as float16 where
    they fit; `balanced` makes each channel's or block's rounding errors sum to zero (module
    docstring; ignored per tensor and for a ragged last block); `search_clip` narrows each
    group's range where that lowers its squared error (`_clip_ranges`), each element's error
    weighted by `importance` (broadcast to x) where given; `clip_picks`: the search's result for
    the same x and arguments (Quantized.clip_picks), taken instead of searching again;
    `known_picks` (channel axis of x, channels, their picks): the search's result for those
    channels alone, searched only in the others (`_clip_rest`). `divisor`
    (broadcast to x): x / divisor is quantized, divided a slice of rows at a time where the steps
    allow (per channel, plain rounding), else as a whole first. `error`: the weight error measured
    while rounding, for weight_error (False: it is known already)."""
    qmin, qmax = (0, levels - 1) if levels else RANGES[dtype]
    if granularity == "tensor":
        axis, block_size = None, None
    elif granularity == "channel":
        block_size = None
    x32 = plain = np.asarray(x, dtype=np.float32)
    if divisor is not None and (balanced or search_clip or granularity != "channel" or x32.ndim == 0):
        x32, divisor = x32 / divisor, None
    if ranges is not None:
        lo, hi = ranges
    elif divisor is not None:  # the same bits as x32 / divisor's, without the full-size quotient
        lo, hi = channel_ranges(x32, axis, divisor)
    else:
        lo, hi = _ranges(x32, granularity, axis, block_size)
    found = (lo, hi)
    picks = None
    if search_clip and granularity != "tensor" and clip_picks is not None:
        ratio = np.asarray(CLIP_RATIOS, np.float64)[clip_picks]
        lo, hi, picks = lo * ratio, hi * ratio, clip_picks
    elif search_clip and granularity != "tensor" and known_picks is not None:
        lo, hi, picks = _clip_rest(x32, lo, hi, qmin, qmax, symmetric, half_scales, granularity, axis, block_size,
                                   importance, known_picks)
    elif search_clip and granularity != "tensor":
        lo, hi, picks = _clip_ranges(x32, lo, hi, qmin, qmax, symmetric, half_scales, granularity, axis, block_size,
                                     importance)
    scale, zero = scales_for_ranges(lo, hi, qmin, qmax, symmetric, half_scales)
    # float32 scales for the arithmetic (float16 ones: the same values, but numpy casts them
    # through a buffer inside every broadcast ufunc, 5x the time of the division itself)
    view, s_b, z_b = _grouped(x32, scale.astype(np.float32, copy=False), zero.astype(np.float32), granularity,
                              axis, block_size)
    with_zero_point = not symmetric or qmin >= 0  # signed symmetric: the zero point is 0
    blocked_view = view.ndim > x32.ndim  # blocks that tile their axis: members along axis + 1
    balance = balanced and (granularity == "channel" or blocked_view)
    store = (np.uint8 if qmax < 256 else np.uint16) if qmin >= 0 else np.int8
    sums = None
    if balance and blocked_view:  # the steps below a slice of rows at a time (balanced.py)
        q = balanced_rounding.round_balanced(view, s_b, z_b if with_zero_point else None, qmin, qmax, axis + 1, store)
    elif balance or view.ndim == 0:
        q = view / s_b
        if with_zero_point:
            q += z_b
        exact = q.copy() if balance else None
        np.rint(q, out=q)
        np.clip(q, qmin, qmax, out=q)
        if balance:
            exact -= q  # the rounding residuals
            balanced_rounding.balance(q, exact, axis + 1 if blocked_view else axis, blocked_view, qmin, qmax)
        q = q.astype(store)
    else:  # the same steps a slice of rows at a time (chunked.py), measuring the error as they go
        sums = [] if error and x32 is plain else None  # else x / divisor was rounded whole: measured apart
        z = z_b if with_zero_point else None
        narrowed = picks is not None and bool(np.any(picks))  # a searched range below its extremes: it clips
        q = round_to_grid(view, s_b, z, qmin, qmax, store, divisor, sums,
                          clipped=narrowed or not within_grid(found, s_b, z, qmin, qmax))
    zp = np.asarray(zero).astype(store) if with_zero_point else None
    qt = Quantized(q.reshape(x32.shape), scale.reshape(_reduce_shape(x32.shape, granularity, axis, block_size)),
                   zp, dtype, granularity, axis, block_size, clip_picks=picks, ranges=found)
    if sums:
        qt.sums = (weakref.ref(np.asarray(x)), divisor, tuple(sums))
    return qt


def within_grid(found: tuple, s_b, z_b, qmin: int, qmax: int) -> bool:
    """Whether no value of a group whose extremes are `found` (each group's min and max of what
    round_to_grid divides by s_b: the weight, or the weight / divisor where that divides as it
    rounds) can round outside [qmin, qmax], so that its clip changes nothing (issue 58: the clip
    was an eighth of the rounding's passes over a weight). The extremes go through the same
    float32 steps as every element (/ s_b, + z_b, rint); each step is monotone for a positive
    scale (IEEE division and addition round correctly, hence monotonically), so every element
    rounds between its group's two. False wherever that cannot be shown: extremes that are not
    float32 or not one per group (a ragged last block's expanded scales), a non-finite step, a
    scale that is not positive, a clipping search's narrowed ranges (they clip: found are the
    ranges before it, which the check then rejects)."""
    lo, hi = (np.asarray(a) for a in found)
    s = np.asarray(s_b)
    if lo.dtype != np.float32 or hi.dtype != np.float32 or s.dtype != np.float32 or lo.size != s.size \
            or hi.size != s.size or (z_b is not None and np.asarray(z_b).size != s.size):
        return False
    with np.errstate(all="ignore"):
        if not (s > 0).all():
            return False
        ends = np.divide(np.stack([lo.reshape(s.shape), hi.reshape(s.shape)]), s)
        if z_b is not None:
            ends += np.asarray(z_b, np.float32).reshape(s.shape)
        np.rint(ends, out=ends)
        return bool(np.isfinite(ends).all() and (ends[0] >= qmin).all() and (ends[1] <= qmax).all())


# Ratios `_clip_ranges` tries. Measured with --target tensorrt int4 at blocks of 128 (output
# relative L2 on the bench's task inputs): MiniLM 0.354 without the search, 0.295 with these,
# 0.305 stopping at 0.8, 0.311 going on to 0.5 in steps of 0.025 (a range fitted closer to each
# block's weights, not to what the layer computes); ddddocr 0.058, 0.046, 0.046.
def has_zero_point(dtype: str, symmetric: bool) -> bool:
    """Whether `quantize` stores zero points for this integer type (see `with_zero_point`)."""
    return not symmetric or RANGES[dtype][0] >= 0


def dequantize(qt: Quantized) -> np.ndarray:
    """The float32 values the graph will compute: (q - zero_point) * scale."""
    q = qt.q.astype(np.float32)
    zero = qt.zero_point.astype(np.float32) if qt.zero_point is not None else np.zeros_like(qt.scale)
    view, s_b, z_b = _grouped(q, qt.scale.astype(np.float32, copy=False), zero, qt.granularity, qt.axis, qt.block_size)
    if qt.zero_point is not None:
        view -= z_b  # views of q: q changes in place
    view *= s_b
    if qt.input_scale is not None:
        view = [1] * q.ndim
        view[qt.input_axis] = -1
        q *= qt.input_scale.reshape(view)
    return q


def snap_to_levels(x: np.ndarray, levels: int, *, granularity: str = "channel", axis: int | None = 0,
                   block_size: int | None = None) -> np.ndarray:
    """x with each group's values snapped to `levels` evenly spaced values over its range (still
    float): same size, but far more compressible by gzip or brotli."""
    return quantize(x, granularity=granularity, axis=axis, block_size=block_size, symmetric=False,
                    levels=levels).dequantize()


def weight_error(x: np.ndarray, qt: Quantized) -> dict[str, float]:
    """Max abs and relative L2 error of the dequantized weight, in one pass over tiles of it
    (chunked.error_sums: no full-size difference; each tile's float32 dot products summed in
    float64, so the figure can differ from one whole-array float32 dot product in its last
    digits)."""
    if qt.remembered is not None:
        known = qt.remembered.error_for(x)
        if known is not None:
            return known
    found = _weight_error(x, qt)
    if qt.remembered is not None:
        qt.remembered.measured(x, found)
    return found


def _weight_error(x: np.ndarray, qt: Quantized) -> dict[str, float]:
    source, divisor, sums = qt.sums if qt.sums is not None else (lambda: None, None, None)
    fused = sums is not None and source() is x and (divisor is None) == (qt.input_scale is None)
    # else tiles at a time, no full-size difference (chunked.py)
    err2, norm2, largest = sums if fused else error_sums(x, qt, _grouped)
    return {
        "max_abs_error": largest,
        "rel_l2_error": float(np.sqrt(err2 / norm2)) if norm2 > 0 else 0.0,
    }
