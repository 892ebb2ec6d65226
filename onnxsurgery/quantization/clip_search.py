"""The clip search of rounding.py: a 4-bit group's range shrunk by each of CLIP_RATIOS (the
candidate grids, `_clip_grids`, every ratio in one call), the group's best grid among them
(`best_clip`: every candidate evaluated on a slice of rows while it is in the CPU's cache, the
slices shared among the threads, chunked.share) and its range as picked (`_clip_ranges`); and the
weighted squared error of one grid (`clipped_error`). The squared errors are the whole-array
code's bits, as in chunked.py."""

from __future__ import annotations

import math

import numpy as np

from . import clip_rows
from .chunked import SHORT_TRAIL, row_slices, rows_of, share, tiles
from .groups import grouped as _grouped
from .scales import GROUP_CHUNK, scales_for_ranges, stored_scale
from .slice_steps import tile_of


def clipped_error(view: np.ndarray, s_b, z_b, qmin: int, qmax: int, importance: np.ndarray | None,
                  out: np.ndarray) -> np.ndarray:
    """Into `out` (float32, view's shape): the squared error of rounding view to the grid
    (s_b, z_b), each weighted by `importance` (view's shape) where given."""
    for part in row_slices(view.shape):
        q = out[part]
        v = view[part]
        clip_rows.rounding_residual(q, v, rows_of(s_b, part, view.ndim), None if z_b is None else
                                    rows_of(z_b, part, view.ndim), qmin, qmax)
        np.square(q, out=q)
        if importance is not None:
            q *= importance[part]
    return out


# Elements (times grids) per slice of `best_clip`: 1 MB of float32 scratch, within a core's L2
CLIP_CHUNK_ELEMENTS = 1 << 18
MEMBERS_LAST = True
# float32 sums of a group's squared errors, each term >= 0, are within (n - 1) * 2^-24 of the
# float64 sums (relative): where the best grid's float32 sum is below every other's by more than
# this, the float64 sums pick the same grid, and only the groups closer than that are summed in
# float64 again (1 in 10^4 to 10^5 of blocks of 32 on normal weights; all-zero groups always)
SEPARATED = 1e-4


def best_clip(view: np.ndarray, s_all: np.ndarray, z_all: np.ndarray | None, qmin: int, qmax: int,
              importance: np.ndarray | None, members: tuple[int, ...], groups: tuple[int, ...]) -> np.ndarray:
    """For each group, the index along axis 0 of `s_all` (and `z_all`) of the grid with the smallest
    float64 sum of `clipped_error` over the group's members, the earliest where several tie: every
    candidate grid of a slice of rows evaluated in one pass over it while it is in cache, instead of
    one pass over the whole tensor per grid, and the slices shared among the threads of
    parallel.WORKERS. `s_all`, `z_all`: [grids, *s_b's shape] (z None: no zero point); `members`:
    the axes of `view` a group sums over; `groups`: the shape of the result. Only for groups that
    lie within a slice of rows (blocks, or channels along axis 0). The squared errors are the
    whole-array code's bits; their sums are float32 first, float64 where that could decide
    otherwise (SEPARATED)."""
    if (len(members) == 1 and members[0] != view.ndim - 1 and MEMBERS_LAST and clip_rows.fits(view.shape[members[0]])
            and math.prod(view.shape[members[0] + 1:]) < SHORT_TRAIL):
        # members along a middle axis with a short run behind them (a Conv weight blocked along
        # its input channels, its 3x3 kernel last): numpy ran loops as short as the kernel for
        # every step; with the members moved last the rows' pass runs long loops on the same
        # bits (isnet's 512x512x3x3: 112 -> 61 ms; a MatMul's [K/32, 32, N] gains nothing).
        # Each grid's sum differs only in float32 order, within what SEPARATED allows: the same
        # picks.
        m = members[0]
        return best_clip(np.moveaxis(view, m, -1), np.moveaxis(s_all, m + 1, -1),
                         None if z_all is None else np.moveaxis(z_all, m + 1, -1), qmin, qmax,
                         None if importance is None else np.moveaxis(importance, m, -1), (view.ndim - 1,), groups)
    grids = s_all.shape[0]
    best = np.empty(groups, np.intp)
    summed = tuple(m + 1 for m in members)
    members_count = int(np.prod([view.shape[m] for m in members]))
    tolerance = max(SEPARATED, 4 * members_count * 2.0 ** -24)

    def differences(v: np.ndarray, part: tuple[slice, ...], q: np.ndarray) -> np.ndarray:
        """Into q ([grids, *v.shape]): each grid's rounded value minus v."""
        return clip_rows.rounding_residual(q, v, tile_of(s_all, part, view.ndim, 1), None if z_all is None else
                                           tile_of(z_all, part, view.ndim, 1), qmin, qmax)

    def run(parts: list[tuple[slice, ...]]) -> None:
        scratch = np.empty(0, np.float32)
        for part in parts:
            v = view[part]
            if scratch.size < grids * v.size:
                scratch = np.empty(grids * v.size, np.float32)
            if in_rows:  # members last: laid out along the groups (clip_rows.py), the same bits
                s = np.broadcast_to(tile_of(s_all, part, view.ndim, 1), (grids, *v.shape[:-1], 1))
                z = None if z_all is None else np.broadcast_to(tile_of(z_all, part, view.ndim, 1), s.shape)
                err, q = clip_rows.grid_errors(v, s, z, qmin, qmax, None if importance is None else
                                               tile_of(importance, part, view.ndim), scratch)
                err = err.reshape(grids, *v.shape[:-1])
            else:
                q = differences(v, part, scratch[:grids * v.size].reshape(grids, *v.shape))
                with np.errstate(over="ignore", invalid="ignore"):  # huge values: handled below
                    np.square(q, out=q)
                    if importance is not None:
                        q *= tile_of(importance, part, view.ndim)
                    err = q.sum(axis=summed)  # float32
            pick = err.argmin(axis=0)
            least = err.min(axis=0)  # err at pick (NaN where pick is a NaN's): take_along_axis, without its overhead
            close = (err <= least * np.float32(1 + tolerance)).sum(axis=0) > 1  # another grid within reach
            huge = ~np.isfinite(least)  # squares past float32's range (a damaged weight): float64 throughout
            close &= ~huge
            if close.any():
                where = np.nonzero(close)
                if in_rows:
                    exact = clip_rows.exact_sums(q, np.ravel_multi_index(where, close.shape))
                else:
                    by_group = q.transpose(0, *[a + 1 for a in range(v.ndim) if a + 1 not in summed], *summed)
                    exact = by_group[(slice(None), *where)].reshape(grids, len(where[0]), -1).sum(axis=-1,
                                                                                                   dtype=np.float64)
                pick[where] = _first_least(exact)
            if huge.any():
                d = differences(v, part, scratch[:grids * v.size].reshape(grids, *v.shape)).astype(np.float64)
                np.square(d, out=d)
                if importance is not None:
                    d *= tile_of(importance, part, view.ndim)
                pick[huge] = _first_least(d.sum(axis=summed))[huge]
            full = (*part, *[slice(None)] * (view.ndim - len(part)))
            best[tuple(p for axis, p in enumerate(full) if axis not in members)] = pick

    last_is_member = view.ndim - 1 in members
    in_rows = members == (view.ndim - 1,) and clip_rows.fits(view.shape[-1])
    share(run, list(tiles(view.shape, CLIP_CHUNK_ELEMENTS // grids, split_last=not last_is_member)), least=2)
    return best


def _first_least(err: np.ndarray) -> np.ndarray:
    """Per group (axes 1...), the index along axis 0 of the smallest error: the first grid's
    stands unless a later one is smaller (NaN never is)."""
    if not np.isnan(err).any():  # argmin's first least, without a pass per grid (0.1 ms a call)
        return err.argmin(axis=0)
    best_err, pick = err[0], np.zeros(err.shape[1:], np.intp)
    for g in range(1, err.shape[0]):
        better = err[g] < best_err
        best_err, pick = np.where(better, err[g], best_err), np.where(better, g, pick)
    return pick


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


# `_clip_rest` searches every row again where the known rows are at most this fraction of them
WHOLE_FROM = 32


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
    if channel_axis == 0 and group_axis == 0 and len(channels) * WHOLE_FROM <= x.shape[0] and _same_grids(
            lo, hi, channels, qmin, qmax, symmetric, half_scales):
        # a large table with a few known rows: the rows left copied out (np.take) took as long as
        # a sixth of the search itself (e5-small's 250k x 384 table, 341 rows known: 0.4 s);
        # every row searched instead, in place, and the known picks put back. A group's pick is
        # its own (best_clip), its grids too where the scales' storage types over every row are
        # those over the rows left (_same_grids), so the other rows' picks are those of the
        # search over them alone
        _, _, picks = _clip_ranges(x, lo, hi, qmin, qmax, symmetric, half_scales, granularity, axis, block_size,
                                   importance)
        picks[channels] = known_picks
        ratio = np.asarray(CLIP_RATIOS, np.float64)[picks]
        return lo * ratio, hi * ratio, picks
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


def _same_grids(lo, hi, known: np.ndarray, qmin: int, qmax: int, symmetric: bool, half_scales) -> bool:
    """Whether `_clip_grids` gives each group the same scales over every channel (axis 0 of lo,
    hi) as over the channels but `known`: the scales' storage type is fixed, or decided alike
    (`_half_scale_types`, symmetric) over both. Asymmetric float16 where it fits is decided ratio
    by ratio over the groups (scales_for_ranges): not compared here (False)."""
    if half_scales is not True:
        return True
    if not symmetric:
        return False
    lo, hi = np.asarray(lo), np.asarray(hi)
    amax = np.maximum(np.maximum(-lo, hi), 0)
    left = np.ones(amax.shape[0], bool)
    left[known] = False
    centre = 0 if qmin < 0 else (qmax + qmin + 1) // 2
    whole = _half_scale_types(amax, qmax - centre)
    return whole is not None and whole == _half_scale_types(amax[left], qmax - centre)


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

    def run(parts: list[slice]) -> None:
        exact = np.empty(min(step, flat.size), np.float64)
        buffers = {}
        for part in parts:  # a slice of groups at a time, every ratio: in cache
            e = exact[:flat[part].size]
            if types is not None and flat.dtype == np.float32 and flat[part].min(initial=np.inf) > 0:
                _typed_scales(flat[part], e, qmax - centre, types, out[:, part], buffers)
                continue
            for g, ratio in enumerate(CLIP_RATIOS):
                e[...] = flat[part] * ratio
                e /= qmax - centre
                out[g, part] = stored_scale(e, half_scales if types is None else types[g])

    # the slices shared among threads (each writes its own groups' scales; types decided over all
    # groups above): e5-small's 250k x 384 table, 3M groups, ran here on one core of two
    share(run, [slice(start, start + step) for start in range(0, flat.size, step)], least=2)
    return scales, zeros


def _typed_scales(amax: np.ndarray, e: np.ndarray, steps: int, types: list, out: np.ndarray, buffers: dict) -> None:
    """`_clip_grids`' symmetric scales of one slice of groups, every amax > 0 (float32), each
    ratio's storage type given (`types`), into out ([ratios, groups], float32): stored_scale's
    steps in place (amax * ratio > 0 for every ratio: no scale replaced by 1), without its
    temporaries. The same bits."""
    n = amax.size
    if buffers.get("n", 0) < n:
        buffers.update(n=n, product=np.empty(n, np.float32), half=np.empty(n, np.float16),
                       below=np.empty(n, bool))
    product, half, below = buffers["product"][:n], buffers["half"][:n], buffers["below"][:n]
    for g, ratio in enumerate(CLIP_RATIOS):
        np.multiply(amax, ratio, out=product)  # in amax's type, as amax * ratio
        np.divide(product, steps, out=e, dtype=np.float64)
        stored = out[g] if types[g] is np.float32 else half
        np.copyto(stored, e, casting="unsafe")  # astype
        np.less(stored, e, out=below)  # _round_up: one step up where rounded below
        bits = stored.view(np.int32 if stored.dtype == np.float32 else np.int16)
        np.add(bits, below, out=bits, casting="unsafe")
        if stored is half:
            out[g] = half


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
