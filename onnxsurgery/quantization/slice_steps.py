"""The steps chunked.py runs on one slice of a weight that are not a pass of their own: the part of
a broadcast operand that meets a slice, spread out to the slice's shape (`Spread`), and a
rounded slice's error figures (`tile_error`, added up in slice order by `summed`), which
round_to_grid measures while the slice is in cache and error_sums from stored integers."""

from __future__ import annotations

import math

import numpy as np

# max and min as the reduce ufuncs d.max() and d.min() call, without their Python layers
_max, _min = np.maximum.reduce, np.minimum.reduce
# Spread leaves an operand with one value per row as it is where rows are at least this long: a
# [32, 2048] slice divided by its column of 32 divisors broadcast 23 us, by them spread out 35 us
# and the copy 11 us (a MatMul weight's input-side divisors under `scaled`)
LONG_ROW = 256


def tile_of(a, tile: tuple[slice, ...], ndim: int, lead: int = 0):
    """The part of `a` (which broadcasts against an array of `ndim` dimensions, after `lead`
    leading axes of its own) that meets that array's `tile`."""
    if np.ndim(a) != ndim + lead:
        return a
    index = [slice(None)] * lead
    shape = np.shape(a)[lead:]
    for axis, part in enumerate(tile):
        index.append(part if shape[axis] != 1 else slice(None))
    return a[tuple(index)]


class Spread:
    """Broadcast operands (a channel's scale and zero point, an input row's divisor) copied out
    to a slice's full shape, into buffers kept per thread: numpy's loops over a full operand ran
    2-4x the speed of the same arithmetic broadcast along short rows (a [64, 1024] slice: a
    multiply by a column of scales 20 us, by the same scales spread out 8 us, the copy 8 us), so
    that two uses pay for the copy. The same bits: each element meets the same value. An operand
    with one row (the same for every slice of whole rows: a MatMul weight's scales along its
    columns, a divisor along its rows) is copied out once, over the most rows a slice has."""

    def __init__(self, ndim: int):
        self.ndim = ndim
        self.buffers: dict = {}
        self.rows: dict = {}  # slot -> an operand with one row, spread out

    def __call__(self, whole, part: tuple[slice, ...], shape: tuple[int, ...], slot: int):
        """`whole`'s part that meets the slice `part` (of `shape`), spread out."""
        if np.ndim(whole) == self.ndim and np.shape(whole)[0] == 1 and len(part) == 1:
            spread = self.rows.get(slot)
            if spread is None or spread.shape[0] < shape[0]:
                spread = self.rows[slot] = np.empty(shape, np.asarray(whole).dtype)
                np.copyto(spread, whole)
            return spread[:shape[0]]
        a = np.asarray(tile_of(whole, part, self.ndim))
        if a.shape == shape or a.ndim != len(shape):
            return a
        if a.shape[-1] == 1 and shape[-1] >= LONG_ROW:
            return a  # one value along each long row: numpy's loop takes it as a scalar, faster than a copy
        size = int(np.prod(shape))
        buffer = self.buffers.get(slot)
        if buffer is None or buffer.size < size or buffer.dtype != a.dtype:
            buffer = self.buffers[slot] = np.empty(size, a.dtype)
        full = buffer[:size].reshape(shape)
        np.copyto(full, a)
        return full


def tile_error(d: np.ndarray, xs: np.ndarray, s, z, r) -> tuple[float, float, float]:
    """One tile's (error^2, x^2, largest |error|) as error_sums computes them, `d` holding the
    tile's integers as float32 (overwritten with the differences): ((d - z) * s) * r - xs. The
    caller holds np.errstate(over="ignore", invalid="ignore") around its slices (once, not per
    slice: entering it cost as much as a slice's subtraction)."""
    if z is not None:
        d -= z
    d *= s
    if r is not None:
        d *= r
    d -= xs
    flat, xf = d.reshape(-1), xs.reshape(-1)
    largest = max(float(_max(flat)), -float(_min(flat)))  # d.max()'s value, without its Python layers
    e, n = float(np.dot(flat, flat)), float(np.dot(xf, xf))
    if not (math.isfinite(e) and math.isfinite(n)):  # huge values: their squares overflow float32
        f64, x64 = flat.astype(np.float64), xf.astype(np.float64)
        e, n = float(np.dot(f64, f64)), float(np.dot(x64, x64))
    return e, n, largest


def summed(sums: np.ndarray) -> tuple[float, float, float]:
    """Tiles' (error^2, x^2, largest) added in tile order: the same float64 sums however the
    tiles were shared among threads."""
    err2 = norm2 = 0.0
    for e, n in sums[:, :2].tolist():  # Python floats: the float64 values, added alike
        err2 += e
        norm2 += n
    return err2, norm2, float(sums[:, 2].max(initial=0.0))
