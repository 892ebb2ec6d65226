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
from .scales import GROUP_CHUNK, scales_for_ranges, stored_scale
from .chunked import best_clip, block_ranges, channel_ranges, clipped_error, error_sums, round_to_grid, share

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


def _expand(scale: np.ndarray, shape, granularity: str, axis: int | None, block_size: int | None) -> np.ndarray:
    """Broadcast a scale (or zero point) back to the full tensor shape."""
    if granularity == "tensor":
        return scale
    if granularity == "channel":
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return scale.reshape(view)
    return np.repeat(scale, block_size, axis=axis).take(range(shape[axis]), axis=axis)


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
        q = round_to_grid(view, s_b, z_b if with_zero_point else None, qmin, qmax, store, divisor, sums)
    zp = np.asarray(zero).astype(store) if with_zero_point else None
    qt = Quantized(q.reshape(x32.shape), scale.reshape(_reduce_shape(x32.shape, granularity, axis, block_size)),
                   zp, dtype, granularity, axis, block_size, clip_picks=picks, ranges=found)
    if sums:
        qt.sums = (weakref.ref(np.asarray(x)), divisor, tuple(sums))
    return qt


# Ratios `_clip_ranges` tries. Measured with --target tensorrt int4 at blocks of 128 (output
# relative L2 on the bench's task inputs): MiniLM 0.354 without the search, 0.295 with these,
# 0.305 stopping at 0.8, 0.311 going on to 0.5 in steps of 0.025 (a range fitted closer to each
# block's weights, not to what the layer computes); ddddocr 0.058, 0.046, 0.046.
CLIP_RATIOS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7)


def _clip_ranges(x: np.ndarray, lo, hi, qmin: int, qmax: int, symmetric: bool, half_scales: bool,
                 granularity: str, axis: int, block_size: int | None, importance: np.ndarray | None = None):
    """Each group's range scaled by the ratio in CLIP_RATIOS that gives the smallest squared
    error over the group (each element's weighted by `importance` where given): outliers
    clipped to the range's edge, in exchange for finer steps for every other value. 4-bit
    grids have so few steps that the exchange usually pays."""
    if granularity == "block" and x.shape[axis] % block_size:
        return lo, hi, np.zeros(np.shape(lo), np.uint8)  # ragged last block: plain ranges (the pass avoids it)
    if importance is not None:  # laid out as _grouped lays out x
        importance = np.broadcast_to(np.asarray(importance, np.float32), x.shape)
        importance = _grouped(importance, lo, lo, granularity, axis, block_size)[0]
    with_zero_point = not symmetric or qmin >= 0
    scales, zeros = _clip_grids(lo, hi, qmin, qmax, symmetric, half_scales)
    if granularity == "block" or axis == 0:  # each group within a slice of rows: every ratio in one pass
        view, s_b, _ = _grouped(x, scales[0], zeros[0], granularity, axis, block_size)
        members = (axis + 1,) if granularity == "block" else tuple(range(1, x.ndim))
        grouped = (len(CLIP_RATIOS), *s_b.shape)
        picked = best_clip(view, scales.reshape(grouped), zeros.reshape(grouped) if with_zero_point else None,
                           qmin, qmax, importance, members, np.shape(lo))
        best_ratio = np.asarray(CLIP_RATIOS, np.float64)[picked]
        return lo * best_ratio, hi * best_ratio, picked.astype(np.uint8)
    best_err = best_index = None
    grids = [_grouped(x, scale, zero, granularity, axis, block_size) for scale, zero in zip(scales, zeros)]
    q = np.empty(grids[0][0].shape, np.float32)  # each ratio's squared errors, in one array reused
    for index, (view, s_b, z_b) in enumerate(grids):
        with np.errstate(over="ignore", invalid="ignore"):  # huge values: errors inf, ratio 1 stands
            clipped_error(view, s_b, z_b if with_zero_point else None, qmin, qmax, importance, q)
        members = tuple(a for a in range(x.ndim) if a != axis)
        err = q.sum(axis=members, dtype=np.float64).reshape(np.shape(lo))
        if best_err is None:
            best_err, best_index = err, np.zeros(err.shape, np.uint8)
        else:
            better = err < best_err
            best_err, best_index = np.where(better, err, best_err), np.where(better, index, best_index)
    best_ratio = np.asarray(CLIP_RATIOS, np.float64)[best_index]
    return lo * best_ratio, hi * best_ratio, best_index.astype(np.uint8)


def _clip_rest(x: np.ndarray, lo, hi, qmin: int, qmax: int, symmetric: bool, half_scales: bool, granularity: str,
               axis: int, block_size: int | None, importance: np.ndarray | None, known: tuple):
    """`_clip_ranges` where the picks of some channels are known (`known`: channel axis of x,
    channels, their picks, as a search over those channels alone gave them): only the other
    channels are searched, and the result is the whole search's, each group's pick being its
    own."""
    channel_axis, channels, known_picks = known
    group_axis = 0 if granularity == "channel" else channel_axis  # lo's: per channel, one value each
    if granularity == "channel" and channel_axis != axis or lo.shape[group_axis] != x.shape[channel_axis]:
        return _clip_ranges(x, lo, hi, qmin, qmax, symmetric, half_scales, granularity, axis, block_size, importance)
    searched = np.ones(x.shape[channel_axis], bool)
    searched[channels] = False
    rest = np.flatnonzero(searched)  # setdiff1d's, without its sort (0.1 s on a 250k-row table)
    picks = np.empty(np.shape(lo), np.uint8)
    np.moveaxis(picks, group_axis, 0)[channels] = np.moveaxis(known_picks, group_axis, 0)
    if rest.size:
        if importance is not None and np.ndim(importance) == x.ndim and np.shape(importance)[channel_axis] > 1:
            importance = np.take(importance, rest, axis=channel_axis)
        _, _, found = _clip_ranges(np.take(x, rest, axis=channel_axis), np.take(lo, rest, axis=group_axis),
                                   np.take(hi, rest, axis=group_axis), qmin, qmax, symmetric, half_scales,
                                   granularity, axis, block_size, importance)
        np.moveaxis(picks, group_axis, 0)[rest] = np.moveaxis(found, group_axis, 0)
    ratio = np.asarray(CLIP_RATIOS, np.float64)[picks]
    return lo * ratio, hi * ratio, picks


def _clip_grids(lo, hi, qmin: int, qmax: int, symmetric: bool, half_scales: bool):
    """Scales and zero points as float32, [len(CLIP_RATIOS), *lo.shape], one row per ratio: the
    bits of scales_for_ranges(lo * ratio, hi * ratio, ...). Symmetric, the largest magnitude is
    taken once: a product's rounding is monotonic and odd, so max(-(lo * r), hi * r, 0) is
    max(-lo, hi, 0) * r in the ranges' own type. Every ratio in one call where the scales'
    storage type is fixed (float32); float16 where they fit is decided ratio by ratio, over its
    own groups, as scales_for_ranges decides it (7 calls per weight, 0.29 s of the encoder's 9.5
    s of CPU before)."""
    lo, hi = np.asarray(lo), np.asarray(hi)
    scales = np.empty((len(CLIP_RATIOS), *lo.shape), np.float32)
    zeros = np.empty_like(scales)
    if not symmetric and half_scales is True:  # float16 or not is decided per ratio, over its groups
        for g, ratio in enumerate(CLIP_RATIOS):
            scale, zero = scales_for_ranges(lo * ratio, hi * ratio, qmin, qmax, symmetric, half_scales)
            scales[g], zeros[g] = scale, zero
        return scales, zeros
    if not symmetric:  # every ratio at once: lo * ratio takes the ratio in lo's type, as here
        ratios = np.asarray(CLIP_RATIOS).astype(lo.dtype).reshape(-1, *[1] * lo.ndim)
        scales[...], zeros[...] = scales_for_ranges(ratios * lo, ratios * hi, qmin, qmax, symmetric, half_scales)
        return scales, zeros
    amax = np.maximum(np.maximum(-lo, hi), 0)
    centre = 0 if qmin < 0 else (qmax + qmin + 1) // 2
    zeros[...] = centre
    if half_scales is not True:  # every ratio at once, as for zero points above
        ratios = np.asarray(CLIP_RATIOS).astype(amax.dtype).reshape(-1, *[1] * amax.ndim)
        scales[...] = stored_scale(np.divide(ratios * amax, qmax - centre, dtype=np.float64), half_scales)
        return scales, zeros
    types = _half_scale_types(amax, qmax - centre)
    flat, out = amax.reshape(-1), scales.reshape(len(CLIP_RATIOS), -1)
    step = GROUP_CHUNK if types is not None else max(1, flat.size)
    exact = np.empty(min(step, flat.size), np.float64)
    for start in range(0, flat.size, step):  # a slice of groups at a time, every ratio: in cache
        part = slice(start, start + step)
        e = exact[:flat[part].size]
        for g, ratio in enumerate(CLIP_RATIOS):
            e[...] = flat[part] * ratio
            e /= qmax - centre
            out[g, part] = stored_scale(e, half_scales if types is None else types[g])
    return scales, zeros


def _half_scale_types(amax: np.ndarray, steps: int) -> list[type] | None:
    """Per ratio, the storage type stored_scale(amax * ratio / steps, True) picks over all groups
    (float16 where every scale, 0 taken as 1, is a normal float16), found from the smallest
    positive and the largest amax alone: amax * ratio (in amax's type) and the division are
    monotonic. None where that does not hold (NaN, or a positive amax whose scale underflows
    to 0): the caller then takes every group at once, as before."""
    positive = amax > 0
    if amax.size == 0 or not positive.any() or not np.isfinite(amax).all():
        return None
    ends = np.array([np.where(positive, amax, np.inf).min(), amax.max()], amax.dtype)
    other = not positive.all()  # groups whose scale is 0 are stored as 1
    types = []
    for ratio in CLIP_RATIOS:
        exact = np.empty(2, np.float64)
        exact[...] = ends * ratio
        exact /= steps
        if not exact[0] > 0:
            return None
        least, most = (min(exact[0], 1.0), max(exact[1], 1.0)) if other else (exact[0], exact[1])
        types.append(np.float16 if least >= 2.0 ** -14 and most <= 65504 / 1.01 else np.float32)
    return types


def has_zero_point(dtype: str, symmetric: bool) -> bool:
    """Whether `quantize` stores zero points for this integer type (see `with_zero_point`)."""
    return not symmetric or RANGES[dtype][0] >= 0


def _grouped(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, granularity: str, axis: int | None,
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
        return (x, _expand(scale, x.shape, granularity, axis, block_size),
                _expand(zero, x.shape, granularity, axis, block_size))
    blocked = list(x.shape)
    blocked[axis:axis + 1] = [n // block_size, block_size]
    s_shape = list(x.shape)
    s_shape[axis:axis + 1] = [n // block_size, 1]
    return x.reshape(blocked), scale.reshape(s_shape), zero.reshape(s_shape)


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


def pack_nibbles(q: np.ndarray, signed: bool) -> np.ndarray:
    """4-bit values (flattened, C order) packed two per byte, low nibble first, as ONNX stores
    INT4/UINT4. Signed values are stored in two's complement."""
    flat = np.ascontiguousarray(q).reshape(-1)
    if flat.dtype.itemsize != 1:
        flat = flat.astype(np.int16).astype(np.uint8)  # the low byte: the nibble that matters
    flat = flat.view(np.uint8)  # two's complement: the low nibble is the value's
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    # each pair of bytes read as one little-endian uint16 (low nibble's byte in bits 0-7): the
    # packed byte is bits 0-3 and 8-11, by whole-word operations (3.6x the byte-strided ones)
    pairs = flat.view("<u2")
    packed = np.empty(pairs.size, np.uint8)
    step = max(1, min(pairs.size, 1 << 18))

    def run(parts: list[slice]) -> None:  # a slice at a time: no full-size temporaries
        low, high = np.empty(step, np.uint16), np.empty(step, np.uint16)
        for part in parts:
            words = pairs[part]
            lo, hi = low[:words.size], high[:words.size]
            np.bitwise_and(words, np.uint16(0x000F), out=lo)
            np.right_shift(words, np.uint16(4), out=hi)
            np.bitwise_and(hi, np.uint16(0x00F0), out=hi)
            np.bitwise_or(lo, hi, out=lo)
            packed[part] = lo  # the low byte: both nibbles

    share(run, [slice(start, start + step) for start in range(0, pairs.size, step)], least=4)  # threads (chunked.py)
    return packed


def pack_halves(nibbles: np.ndarray) -> np.ndarray:
    """Values 0..15 two per byte along the last axis (an even length), for the `arith` and
    `gather` lowerings: byte i holds value i in its low nibble and value i + n/2 in its high
    one, so that unpacking is two shifts and a Concat, with no interleaving. A 2-D array is
    packed row by row (rows can then be gathered before unpacking)."""
    x = nibbles.astype(np.uint8, copy=False)  # read only
    if x.shape[-1] % 2:
        raise ValueError("pack_halves needs an even number of values")
    half = x.shape[-1] // 2
    return x[..., :half] | (x[..., half:] << 4)
