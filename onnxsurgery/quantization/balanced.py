"""Balanced rounding (rounding.py's module doc says why): after rounding to nearest, the fewest
values of each group move one step so that the group's rounding errors sum to zero."""

from __future__ import annotations

import math

import numpy as np

from .chunked import rows_of, share


def balance(q: np.ndarray, residual: np.ndarray, axis: int, members_along_axis: bool, qmin: int,
             qmax: int) -> None:
    """Balanced rounding, in place on the rounded and clipped q: in each group, the k values
    with the largest residuals (exact - rounded) of the sign of the group's residual sum move
    one step that way, k being that sum rounded; values at qmin or qmax do not move past it.
    A group is a block (members along `axis`) or a channel (members along every axis but
    `axis`). Where k is small (blocks: rarely above 3) the values are picked one per group per
    round, an argmax over the groups still short; a channel of many values can need hundreds
    (crepe_full's 512 x 65536 Conv: 15 s of argmax), so its k are picked at once by partition,
    ties to the lower index as the argmax order takes them: the same values move. Blocks are
    balanced a slice of q along axis 0 at a time (each block lies within one), the slices shared
    among threads (chunked.share): the rows of a slice fit in cache while they are moved into rows
    and back (crepe_full's 128 x 1024 x 64 Conv weight in blocks: 0.3-0.4 s a weight, one core)."""
    if not members_along_axis or axis == 0:
        _balance_rows(q, residual, axis, members_along_axis, qmin, qmax)
        return

    def run(mine: list[slice]) -> None:
        for part in mine:
            _balance_rows(q[part], residual[part], axis, True, qmin, qmax)

    share(run, slices(q.shape), least=2)


def round_balanced(view: np.ndarray, s_b, z_b, qmin: int, qmax: int, axis: int, store: type) -> np.ndarray:
    """rint(view / s_b [+ z_b]) clipped to [qmin, qmax] and balanced over blocks (members along
    `axis`, never 0), as `store` integers: rounding.quantize's steps, a slice along axis 0 at a
    time (`slices`) on both cores, with no full-size float copies (two before: the rounded
    values and their residuals). The same ufuncs on each element: the same integers."""
    out = np.empty(view.shape, store)

    def run(mine: list[slice]) -> None:
        for part in mine:
            # computed with each block's members last and contiguous, so that `_balance_rows`
            # finds them in rows as they are: no copies of q and the residuals into rows and of q
            # back (balancing a 512 x 512 x 3 x 3 Conv weight: 23 -> 20 ms over plain rounding's)
            v = np.moveaxis(view[part], axis, -1)
            q = np.empty(v.shape, np.float32)
            np.divide(v, np.moveaxis(rows_of(s_b, part, view.ndim), axis, -1), out=q)
            if z_b is not None:
                q += np.moveaxis(rows_of(z_b, part, view.ndim), axis, -1)
            exact = q.copy()
            np.rint(q, out=q)
            np.clip(q, qmin, qmax, out=q)
            exact -= q  # the rounding residuals
            _balance_rows(q, exact, q.ndim - 1, True, qmin, qmax)
            np.moveaxis(out[part], axis, -1)[...] = q

    share(run, slices(view.shape), least=2)
    return out


def slices(shape: tuple[int, ...]) -> list[slice]:
    """Slices along axis 0 of about SLICE_ELEMENTS elements, each a multiple of SUM_BUFFER
    elements (but the last): a row's float64 sum in `_balance_rows` is then taken in the same
    buffer of numpy's, with the same pairs of additions, as over the whole array."""
    per_index = max(1, math.prod(shape[1:]))
    unit = SUM_BUFFER // math.gcd(per_index, SUM_BUFFER)
    step = unit * max(1, SLICE_ELEMENTS // (unit * per_index))
    return [slice(start, start + step) for start in range(0, shape[0], step)]


def _balance_rows(q: np.ndarray, residual: np.ndarray, axis: int, members_along_axis: bool, qmin: int,
                  qmax: int) -> None:
    """`balance` on q's groups moved into rows (a copy unless they already are); `residual` is
    used up as scratch."""
    if members_along_axis:
        q_rows = np.moveaxis(q, axis, -1)  # a view: writing into it writes into q
        shape2d = (-1, q.shape[axis])
    else:
        q_rows = np.moveaxis(q, axis, 0)
        shape2d = (q.shape[axis], -1)
    q2d = q_rows.reshape(shape2d)  # a copy unless the members are already contiguous
    score = np.moveaxis(residual, axis, -1 if members_along_axis else 0).reshape(shape2d)
    k = np.rint(score.sum(axis=1, dtype=np.float64)).astype(np.int64)
    short = np.flatnonzero(k)
    if not short.size:  # every group balanced already: nothing moves
        return
    sign = np.sign(k).astype(np.float32)
    score *= sign[:, None]  # how far each value is from rounding the way its group needs
    # a value at the edge its group moves toward stays (q is clipped: >= qmax is == qmax); groups
    # with k = 0 get their qmin values marked too, but are never read
    edge = np.where(sign > 0, np.float32(qmax), np.float32(qmin))
    np.copyto(score, -np.inf, where=q2d == edge[:, None])
    needed = np.abs(k[short])
    few = needed <= FEW_MOVES
    rows, left = short[few], needed[few]
    while rows.size:
        # while most groups still move, one argmax over all of them (a row's own, as over its
        # copy) instead of copying those rows out first
        picked = score.argmax(axis=1)[rows] if 2 * rows.size > len(k) else score[rows].argmax(axis=1)
        movable = score[rows, picked] > -np.inf
        q2d[rows[movable], picked[movable]] += sign[rows[movable]]
        score[rows, picked] = -np.inf
        left -= 1
        keep = (left > 0) & movable
        rows, left = rows[keep], left[keep]
    many, counts = short[~few], needed[~few]
    step = max(1, AT_ONCE // max(1, score.shape[1]))
    for start in range(0, many.size, step):  # rows a chunk at a time: the copies stay small
        rows, cols = largest_in_rows(score[many[start:start + step]], counts[start:start + step])
        q2d[many[start:start + step][rows], cols] += sign[many[start:start + step][rows]]
    if not np.may_share_memory(q2d, q):  # moved into rows by a copy: back into q
        q_rows[...] = q2d.reshape(q_rows.shape)


FEW_MOVES = 8  # up to this many moves a group, an argmax a move (balance)
AT_ONCE = 1 << 16  # values of the groups with more moves than that, picked at once (largest_in_rows)
# Elements per slice of `balance` (blocks): its copies into rows and back stay in cache
SLICE_ELEMENTS = 1 << 16
# numpy's buffered float64 sums take 8192 elements at a time: slices of a multiple of it sum
# each row in the same buffer, with the same pairs of additions, as the whole array would
SUM_BUFFER = 8192


def largest_in_rows(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`largest(values[r], counts[r])` for every row r at once, as (rows, columns) of the chosen
    values: one partition of the rows at the largest count, instead of one per row (each a few
    numpy calls: a 192 x 192 x 3 x 3 Conv weight's output channels took 192 of them a rounding).
    Wide rows partition every SAMPLE_STEP-th value first: its count-th largest is a bound the
    row's own count-th largest is at or above (the row holds that many values at or above it),
    so one pass finds the few candidates and the partition runs on those alone. The ties are
    then resolved among the values at or above the count-th largest (a 512 x 4608 Conv weight's
    channels, 9-40 moves each: 32-37 -> 7 ms, the same values chosen, in the same order). No
    value is NaN (_balance_rows: a group whose residuals sum to a number)."""
    counts = np.minimum(counts, values.shape[1])
    most, width = int(counts.max()), values.shape[1]
    step = SAMPLE_STEP if width >= 4 * SAMPLE_STEP * most else 1
    bound = _kth_largest(values[:, ::step], counts, most)
    # row by row, columns ascending (flat indices: np.nonzero's two takes 2.5x the time)
    flat = np.flatnonzero(values >= bound[:, None])
    rows, cols = np.divmod(flat, values.shape[1])
    chosen = values.reshape(-1)[flat]
    kth = bound
    if step > 1:  # each row's candidates in a row of their own, padded with -inf
        starts = np.searchsorted(rows, np.arange(len(counts)))
        block = np.full((len(counts), int(np.diff(np.append(starts, rows.size)).max())), -np.inf, values.dtype)
        block[rows, np.arange(rows.size) - starts[rows]] = chosen
        kth = _kth_largest(block, counts, most)
        inside = chosen >= kth[rows]
        rows, cols, chosen = rows[inside], cols[inside], chosen[inside]
    above = chosen > kth[rows]
    ties = ~above
    # the ties to the lower index: as many as the row's count leaves after the values above its kth
    rank = np.cumsum(ties)
    rank -= np.concatenate(([0], rank))[np.searchsorted(rows, np.arange(len(counts)))][rows]
    left = counts - np.bincount(rows[above], minlength=len(counts))
    keep = above | (ties & (rank <= left[rows]))
    keep &= chosen > -np.inf
    return rows[keep], cols[keep]


def _kth_largest(values: np.ndarray, counts: np.ndarray, most: int) -> np.ndarray:
    """Each row's counts[r]-th largest value (counts at most `most`, `most` at most the width).
    The smallest of the values negated: partitioning at the width less `most` instead took 10x
    the time on largest_in_rows' rows padded with -inf (numpy 2's introselect)."""
    top = np.partition(-values, most - 1, axis=1)[:, :most]  # -(each row's `most` largest)
    top.sort(axis=1)
    return -top[np.arange(len(counts)), counts - 1]


SAMPLE_STEP = 8  # largest_in_rows: rows of 32 times the largest count or more are sampled first


def largest(values: np.ndarray, count: int) -> np.ndarray:
    """The indices of the `count` largest finite values, ties to the lower index (what
    successive argmaxes pick), fewer where fewer are finite."""
    count = min(count, values.size)
    kth = -np.partition(-values, count - 1)[count - 1]
    chosen = np.concatenate([np.flatnonzero(values > kth), np.flatnonzero(values == kth)])[:count]
    return chosen[values[chosen] > -np.inf]
