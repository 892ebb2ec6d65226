"""clip_search.best_clip's pass where each group's members run along the last axis (blocks of a
Gather table, or of a weight blocked along its last axis): the same bits, laid out so that
numpy's loops run long.

In that layout a group is 16-128 contiguous values, and numpy runs one short loop per group:
dividing by a scale broadcast over the members, and above all summing them (`sum(axis=-1)`: 17
ns a group, 40% of the search on e5-small's 250k x 384 table). Here each slice of rows is
turned once into [members, groups] (a copy of the values, not of the grids' work), so that
every step runs along the groups, each grid's scale broadcast over whole rows, and the float32
sums add the rows in order (ORDER_FREE). `pairwise_rows` gives numpy's own pairwise sum of a
contiguous run written out over the rows instead: eight partial sums, each member i added into
sum i % 8 in order, then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) (numpy's
pairwise_sum for 8 to 128 values; checked bit for bit in tests/test_chunked.py)."""

from __future__ import annotations

import numpy as np

# Member counts whose float32 sum is one block of numpy's pairwise summation (PW_BLOCKSIZE 128)
# with no remainder: the order `pairwise_rows` reproduces
def fits(members: int) -> bool:
    return 8 <= members <= 128 and members % 8 == 0


def pairwise_rows(q: np.ndarray) -> np.ndarray:
    """q.sum over axis 1 ([grids, members, groups], float32) as numpy sums a contiguous run of
    `members` values (fits()): the same additions in the same order, along whole rows."""
    r = q[:, 0:8] + q[:, 8:16] if q.shape[1] > 8 else q[:, 0:8].copy()
    for start in range(16, q.shape[1], 8):
        r += q[:, start:start + 8]
    return ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))


def rounding_residual(q: np.ndarray, v: np.ndarray, s, z, qmin: int, qmax: int) -> np.ndarray:
    """Into q: v rounded to the grid (s, zero points z or None) and back, minus v, in the ufunc
    order every clip search measures with (so their sums agree to the bit)."""
    np.divide(v, s, out=q)
    if z is not None:
        q += z
    np.clip(np.rint(q, out=q), qmin, qmax, out=q)
    if z is not None:
        q -= z
    q *= s
    q -= v
    return q


def grid_errors(v: np.ndarray, s: np.ndarray, z: np.ndarray | None, qmin: int, qmax: int,
                importance: np.ndarray | None, scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each group's float32 sum of squared errors per grid [grids, groups], the squared errors
    [grids, members, groups]) of a slice `v` ([..., members], the members last) against the
    grids `s` (and zero points `z`), [grids, ..., 1]; `importance` broadcasts to v. Each
    element goes through clip_search.best_clip's ufuncs, in its order and types."""
    members = v.shape[-1]
    groups = v.size // members
    grids = s.shape[0]
    columns = np.ascontiguousarray(v.reshape(groups, members).T)  # [members, groups]
    s = s.reshape(grids, 1, groups)
    q = scratch[:grids * v.size].reshape(grids, members, groups)
    rounding_residual(q, columns, s, None if z is None else z.reshape(grids, 1, groups), qmin, qmax)
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: best_clip takes them in float64
        np.square(q, out=q)
        if importance is not None:
            q *= np.ascontiguousarray(np.broadcast_to(importance, v.shape).reshape(groups, members).T)
        sums = np.add.reduce(q, axis=1)  # the members' rows added in order (ORDER_FREE)
        if not sums.max(initial=0.0) < ORDER_FREE:  # near float32's end, or NaN: the whole-array order
            sums = pairwise_rows(q)
        return sums, q


# grid_errors' float32 sums add each group's members in order, one pass over whole rows, where
# numpy's pairwise order (pairwise_rows) took 2.5x as long: best_clip uses them only to find
# the groups whose least error is clear of every other's by its tolerance, which bounds the
# difference any order of adding n terms >= 0 makes ((n - 1) * 2^-24), and sums those that
# are not in float64 again: the same picks. Below this sum no order overflows float32 where
# another does not (best_clip takes an overflowed group in float64 throughout).
ORDER_FREE = 2.0 ** 126


def exact_sums(q: np.ndarray, where: np.ndarray) -> np.ndarray:
    """The float64 sums [grids, len(where)] of the groups `where` (flat indices) of
    `grid_errors`' squared errors, as best_clip sums a gathered [grids, n, members] array."""
    return np.ascontiguousarray(q[:, :, where].transpose(0, 2, 1)).sum(axis=-1, dtype=np.float64)
