"""Elementwise steps of rounding.py run a slice of rows at a time, so that the chain of
ufuncs on each slice stays in the CPU's cache instead of passing over the whole tensor once
per step (and allocating a full-size temporary for each). Each element goes through exactly
the ufuncs, in the order and types, that the whole-array code applies: the results are the
same bits. Reductions whose order could change a float sum are left to the callers; min and
max are exact in any order.

Quantizing a 1.4B-parameter decoder spent most of its time in these passes over memory."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator

from .slice_steps import Spread, summed, tile_error, tile_of  # noqa: F401 - tile_of: chunked's too

import numpy as np


# Elements per slice: 256 KB of float32, within a core's L2 cache with a few such buffers
CHUNK_ELEMENTS = 1 << 16


def row_slices(shape: tuple[int, ...], elements: int | None = None) -> Iterator[slice]:
    """Slices along axis 0 of an array of `shape`, each about `elements` (CHUNK_ELEMENTS)
    elements (at least one row)."""
    rows = shape[0]
    per_row = max(1, int(np.prod(shape[1:], dtype=np.int64)))
    step = max(1, (elements or CHUNK_ELEMENTS) // per_row)
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


def tiles(shape: tuple[int, ...], elements: int, split_last: bool) -> Iterator[tuple[slice, ...]]:
    """Index tuples (rows along axis 0, and where `split_last` and one row holds more than
    `elements`, columns along the last axis too) covering an array of `shape`, each about
    `elements` elements: a wide matrix's blocks along axis 0 ([nblocks, block, N]) have rows
    of block x N elements, far beyond a cache."""
    per_row = max(1, int(np.prod(shape[1:], dtype=np.int64)))
    if not split_last or len(shape) < 2 or per_row <= elements:
        for part in row_slices(shape, elements):
            yield (part,)
        return
    width = shape[-1]
    per_column = per_row // width
    step = max(1, elements // max(1, per_column))
    for row in range(shape[0]):
        for start in range(0, width, step):
            yield (slice(row, row + 1), *[slice(None)] * (len(shape) - 2), slice(start, min(start + step, width)))


def rows_of(a, part: slice, ndim: int):
    """The part of `a` (which broadcasts against an array of `ndim` dimensions) that meets that
    array's rows `part`."""
    if np.ndim(a) == ndim and np.shape(a)[0] != 1:
        return a[part]
    return a


def _scratch(shape: tuple[int, ...]) -> np.ndarray:
    rows = max((s.stop - s.start for s in row_slices(shape)), default=0)
    return np.empty((rows, *shape[1:]), np.float32)


# np.clip's ufunc without the Python layers np.clip goes through (a few us a slice)
_clip = np.clip if not hasattr(getattr(np, "_core", None), "umath") else np._core.umath.clip


def round_to_grid(view: np.ndarray, s_b, z_b, qmin: int, qmax: int, store: type,
                  divisor: np.ndarray | None = None, error_into: list | None = None,
                  clipped: bool = True) -> np.ndarray:
    """rint(view / s_b [+ z_b]) clipped to [qmin, qmax], as `store` integers (view's shape).
    `z_b` None: no zero point. `divisor`: of view / divisor instead. The slices are shared
    among threads (`share`): each writes its own part of the result. `error_into` (a list):
    `error_sums`' three figures for the result (dequantized, times `divisor` where given,
    against `view`) appended to it, measured on each slice while it is in cache from the
    rounded floats, the same bits as error_sums' pass over the stored integers afterwards: that
    pass read the weight and its integers again (0.9 s of int8 on a 1.21 GB decoder).
    `clipped` False: the caller has proven that no rounded value leaves [qmin, qmax]
    (rounding.within_grid), so the clip, which would change no bit, is skipped."""
    out = np.empty(view.shape, store)
    parts = list(tiles(view.shape, CHUNK_ELEMENTS, split_last=True))  # wide rows cut along the last axis
    sums = np.zeros((len(parts), 3)) if error_into is not None else None  # as error_sums' (tile order)
    index = {id(part): i for i, part in enumerate(parts)}

    def run(mine: list[tuple[slice, ...]]) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # huge values: tile_error's float64 sums
            rounded(mine)

    def rounded(mine: list[tuple[slice, ...]]) -> None:
        scratch, spread = np.empty(0, np.float32), Spread(view.ndim)
        for part in mine:
            v = view[part]
            if scratch.size < v.size:
                scratch = np.empty(v.size, np.float32)
            q = scratch[:v.size].reshape(v.shape)
            measured = sums is not None and v.size
            # each broadcast operand spread over the slice once where used again for the error
            r = spread(divisor, part, v.shape, 0) if divisor is not None else None
            s = spread(s_b, part, v.shape, 1) if measured else tile_of(s_b, part, view.ndim)
            z = None if z_b is None else spread(z_b, part, v.shape, 2) if measured else tile_of(z_b, part, view.ndim)
            if r is not None:
                np.divide(v, r, out=q)
                np.divide(q, s, out=q)
            else:
                np.divide(v, s, out=q)
            if z is not None:
                q += z
            np.rint(q, out=q)
            if clipped:
                _clip(q, qmin, qmax, out=q)
            out[part] = q
            if measured:
                sums[index[id(part)]] = tile_error(q, v, s, z, r)

    share(run, parts)
    if error_into is not None:
        error_into.extend(summed(sums))
    return out


_POOL = None
_POOL_LOCK = threading.Lock()
# Slices (of CHUNK_ELEMENTS) below which one tensor's pass stays on the calling thread: handing
# work to the pool costs tens of microseconds, a slice's steps about as much
SHARED_FROM_PARTS = 8


def _workers() -> int:
    from ..parallel import WORKERS
    return WORKERS


def _pool():
    """Threads the slices of one tensor share (numpy's loops release the GIL); never the pool
    of parallel.ordered_map, whose workers wait here. Nothing run on it submits to it again."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor
            _POOL = ThreadPoolExecutor(_workers(), thread_name_prefix="chunked")
    return _POOL


def share(run: Callable[[list], None], parts: list, least: int = SHARED_FROM_PARTS) -> None:
    """run(parts) split among the threads of parallel.WORKERS (every `workers`-th part each), or
    on this thread alone where there are fewer than `least` parts or one worker. `run` must
    write only what its parts own, so that the result does not depend on the split: quantizing
    one large weight alone (the budget of parallel.ordered_map) left the second core idle."""
    workers = min(_workers(), len(parts))
    if workers <= 1 or len(parts) < least:
        run(parts)
        return
    for done in [_pool().submit(run, parts[i::workers]) for i in range(workers)]:
        done.result()


def channel_ranges(x: np.ndarray, axis: int, divisor: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """min and max of x (or of x / divisor) over every axis but `axis`, one pass over x. Along
    axis 0 its slices of rows are shared among threads (`share`); along another axis each thread
    takes a range of channels through every slice of rows in turn, each slice's extremes folded
    into the running ones as one thread would: one slice's extremes were kept for every slice
    before (a [2048, 32000] lm_head's 1024 slices: 262 MB of them)."""
    parts = list(row_slices(x.shape))
    if not parts:
        return None, None
    others = tuple(a for a in range(1, x.ndim))
    if axis == 0:
        lo, hi = np.empty(x.shape[0], x.dtype), np.empty(x.shape[0], x.dtype)

        def run(mine: list[slice]) -> None:
            scratch = _scratch(x.shape) if divisor is not None else None
            for part in mine:
                rows = x[part]
                if divisor is not None:
                    rows = np.divide(rows, rows_of(divisor, part, x.ndim), out=scratch[:part.stop - part.start])
                flat = rows.reshape(rows.shape[0], -1)
                flat.min(axis=1, out=lo[part])
                flat.max(axis=1, out=hi[part])

        share(run, parts)
        return lo, hi
    reduce = (0,) + tuple(a for a in others if a != axis)
    channels = x.shape[axis]
    lo, hi = np.empty(channels, x.dtype), np.empty(channels, x.dtype)
    workers = min(_workers(), channels) if len(parts) >= SHARED_FROM_PARTS else 1
    step = -(-channels // max(1, workers))
    ranges = [slice(start, min(start + step, channels)) for start in range(0, channels, step)]

    def fold(mine: list[slice]) -> None:
        for cols in mine:
            at = (slice(None),) * axis + (cols,)
            scratch = None
            for k, part in enumerate(parts):
                rows = x[part][at]
                if divisor is not None:
                    if scratch is None:
                        scratch = np.empty((parts[0].stop - parts[0].start, *rows.shape[1:]), np.float32)
                    d = rows_of(divisor, part, x.ndim)
                    d = d[at] if np.ndim(d) == x.ndim and np.shape(d)[axis] != 1 else d
                    rows = np.divide(rows, d, out=scratch[:part.stop - part.start])
                if not k:
                    rows.min(axis=reduce, out=lo[cols])
                    rows.max(axis=reduce, out=hi[cols])
                else:  # the next slice's extremes, then folded in: the steps of one thread before
                    np.minimum(lo[cols], rows.min(axis=reduce), out=lo[cols])
                    np.maximum(hi[cols], rows.max(axis=reduce), out=hi[cols])

    share(fold, ranges, least=2)
    return lo, hi


# block_ranges: members followed by fewer values than this are moved to the front first
SHORT_TRAIL = 64


def block_ranges(blocks: np.ndarray, member_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """min and max of `blocks` (x viewed as [..., nblocks, block, ...]) over `member_axis`
    (never 0), one pass."""
    shape = blocks.shape[:member_axis] + blocks.shape[member_axis + 1:]
    lo, hi = np.empty(shape, blocks.dtype), np.empty(shape, blocks.dtype)
    split = member_axis != blocks.ndim - 1

    def run(parts: list[tuple[slice, ...]]) -> None:
        scratch = np.empty(0, blocks.dtype)
        for part in parts:
            rows = blocks[part]
            full = (*part, *[slice(None)] * (blocks.ndim - len(part)))
            kept = tuple(p for axis, p in enumerate(full) if axis != member_axis)
            if split and math.prod(rows.shape[member_axis + 1:]) < SHORT_TRAIL and rows.shape[member_axis] > 1:
                # members along a middle axis with a short run behind them (a Conv weight blocked
                # along its input channels: its 3 x 3 kernel): numpy reduced in loops as short as
                # that run (5.8 ns a value); moved to the front first, each reduction runs along
                # whole rows (1.6 ns, the copy included). min and max are exact in any order.
                if scratch.size < rows.size:
                    scratch = np.empty(rows.size, blocks.dtype)
                front = np.moveaxis(rows, member_axis, 0)
                across = scratch[:rows.size].reshape(front.shape)
                np.copyto(across, front)
                np.minimum.reduce(across, axis=0, out=lo[kept])
                np.maximum.reduce(across, axis=0, out=hi[kept])
                continue
            if split or len(part) != 1 or rows.shape[-1] < 2:
                rows.min(axis=member_axis, out=lo[kept])
                rows.max(axis=member_axis, out=hi[kept])
                continue
            # blocks along the last axis: numpy reduces each block's few elements in a loop of
            # its own (0.34 ms a slice of 64K elements for min alone); the slice's blocks laid
            # out along its columns first, both reductions run along whole rows (0.15 ms for
            # the copy and both). min and max are exact in any order.
            size, width = rows.size, rows.shape[-1]
            if scratch.size < size:
                scratch = np.empty(size, blocks.dtype)
            across = scratch[:size].reshape(width, size // width)
            np.copyto(across, rows.reshape(-1, width).T)
            low, high = lo[part[0]].reshape(-1), hi[part[0]].reshape(-1)  # views: whole rows of lo, hi
            np.minimum.reduce(across, axis=0, out=low)
            np.maximum.reduce(across, axis=0, out=high)

    share(run, list(tiles(blocks.shape, CHUNK_ELEMENTS, split_last=split)))  # wide rows cut along the last axis
    return lo, hi


def error_sums(x: np.ndarray, qt, grouped) -> tuple[float, float, float]:
    """(sum of (qt.dequantize() - x)^2, sum of x^2, the largest |difference|) in one pass over
    tiles of the grouped weight, with no full-size difference: each tile's float32 dot
    products summed in float64 (in float64 throughout where a tile's squares overflow float32).
    `grouped` is groups.grouped."""
    q = qt.q.reshape(qt.q.shape or (1,))
    x = np.asarray(x, np.float32).reshape(q.shape)
    zero = qt.zero_point.astype(np.float32) if qt.zero_point is not None else np.zeros_like(qt.scale)
    scale = qt.scale.astype(np.float32, copy=False)  # float16 ones cast through a buffer in each ufunc: slow
    if qt.q.ndim == 0:
        scale, zero = scale.reshape(1), zero.reshape(1)
    q_view, s_b, z_b = grouped(q, scale, zero, qt.granularity, qt.axis, qt.block_size)
    x_view = x.reshape(q_view.shape)
    r = None
    if qt.input_scale is not None:
        along = [1] * q.ndim
        along[qt.input_axis] = -1
        r = np.broadcast_to(qt.input_scale.reshape(along), q.shape)
        r = np.ascontiguousarray(r).reshape(q_view.shape) if q_view.ndim != q.ndim else r
    parts = list(tiles(q_view.shape, CHUNK_ELEMENTS, split_last=True))
    sums = np.zeros((len(parts), 3))  # each tile's (error^2, x^2, largest |error|), added in tile order below
    index = {id(part): i for i, part in enumerate(parts)}

    def run(mine: list[tuple[slice, ...]]) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # huge values: tile_error's float64 sums
            measured(mine)

    def measured(mine: list[tuple[slice, ...]]) -> None:
        scratch = np.empty(0, np.float32)
        for part in mine:
            qs, xs = q_view[part], x_view[part]
            if not qs.size:
                continue
            if scratch.size < qs.size:
                scratch = np.empty(qs.size, np.float32)
            d = scratch[:qs.size].reshape(qs.shape)
            d[...] = qs
            z = tile_of(z_b, part, q_view.ndim) if qt.zero_point is not None else None
            sums[index[id(part)]] = tile_error(d, xs, tile_of(s_b, part, q_view.ndim), z,
                                                tile_of(r, part, q_view.ndim) if r is not None else None)

    share(run, parts)
    return summed(sums)


def abs_max(x: np.ndarray, axis: int) -> np.ndarray:
    """np.abs(x).max over every axis but `axis`, without a full-size |x|; slices shared among
    threads as in channel_ranges."""
    parts = list(row_slices(x.shape))
    if not parts:
        return None
    maxima = np.empty(x.shape[0], np.abs(x[:0]).dtype) if axis == 0 else None
    partial: list = [None] * len(parts)
    index = {id(part): i for i, part in enumerate(parts)}

    def run(mine: list[slice]) -> None:
        for part in mine:
            rows = np.abs(x[part])
            if axis == 0:
                rows.reshape(rows.shape[0], -1).max(axis=1, out=maxima[part])
            else:
                partial[index[id(part)]] = rows.max(axis=tuple(a for a in range(x.ndim) if a != axis))

    share(run, parts)
    if axis != 0:
        maxima = partial[0]
        for found in partial[1:]:
            np.maximum(maxima, found, out=maxima)
    return maxima


def abs_max_with_ranges(x: np.ndarray, scales_of: Callable[[np.ndarray], np.ndarray]
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(abs_max(x, 0), and channel_ranges(x, 1, r) with r = scales_of(those row maxima) as a
    column) of a 2-D x in one pass: each slice of rows' maxima, then their r (`scales_of` works
    element by element: equalizing_from), then the slice divided by them, while it is in cache.
    The plan's finite check read each weight for its row maxima and quantizing read it again for
    its columns' ranges (int8 on a 1.35 GB decoder: a pass over every weight). min and max are
    exact in any order: the same values as the two passes."""
    parts = list(row_slices(x.shape))
    maxima = np.empty(x.shape[0], np.abs(x[:0]).dtype)
    folded: list = []

    def run(mine: list[slice]) -> None:
        lo = hi = None
        scratch = _scratch(x.shape)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for part in mine:
                rows = x[part]
                np.abs(rows, out=scratch[:part.stop - part.start]).max(axis=1, out=maxima[part])
                q = np.divide(rows, scales_of(maxima[part]).reshape(-1, 1), out=scratch[:part.stop - part.start])
                if lo is None:
                    lo, hi = q.min(axis=0), q.max(axis=0)
                else:
                    np.minimum(lo, q.min(axis=0), out=lo)
                    np.maximum(hi, q.max(axis=0), out=hi)
        if lo is not None:
            folded.append((lo, hi))  # list.append: atomic under the GIL

    share(run, parts)
    lo, hi = folded[0]
    for other_lo, other_hi in folded[1:]:
        np.minimum(lo, other_lo, out=lo)
        np.maximum(hi, other_hi, out=hi)
    return maxima, lo, hi


def all_finite(x: np.ndarray) -> bool:
    """np.isfinite(x).all(), without a full-size array of booleans; stops at the first slice
    that holds a NaN or Inf."""
    if x.ndim == 0:
        return bool(np.isfinite(x))
    found = []

    def run(parts: list[slice]) -> None:
        if not all(np.isfinite(x[part]).all() for part in parts if not found):
            found.append(False)

    share(run, list(row_slices(x.shape)))
    return not found
