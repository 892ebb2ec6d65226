"""Scales and zero points for groups with a given min and max, as stored: float16 where every
scale is a normal float16 (rounded up, so that the range still fits the integers), else
float32; zero points exact integers. rounding.py quantizes against them, gptq.py too."""

from __future__ import annotations

import numpy as np


# Groups per slice of scales_for_ranges: its float64 steps on a 1.36B decoder's 42M blocks
# allocated and faulted in a 340 MB array per step
GROUP_CHUNK = 1 << 16


def scales_for_ranges(lo, hi, qmin: int, qmax: int, symmetric: bool, half_scales: bool | type = False):
    """Stored scales and zero points (float64, integral) for groups with these min and max.
    `half_scales`: float16 scales where all fit (True), or a forced storage type (np.float16 or
    np.float32: GPTQ fixes it once for a tensor whose groups it scales one at a time). Many
    groups are taken GROUP_CHUNK at a time (the storage type decided over all of them first):
    the same values."""
    lo, hi = np.asarray(lo), np.asarray(hi)
    if lo.size <= GROUP_CHUNK or lo.shape != hi.shape:
        return _scales_for_ranges(lo, hi, qmin, qmax, symmetric, half_scales)
    flat_lo, flat_hi = lo.reshape(-1), hi.reshape(-1)
    parts = [slice(i, i + GROUP_CHUNK) for i in range(0, lo.size, GROUP_CHUNK)]
    dtype = half_scales if isinstance(half_scales, type) else np.float32
    steps = _Steps(qmin, qmax, symmetric)
    if half_scales is True:  # float16 only if every group's scale fits (scale_dtype), over all groups
        least, most = np.inf, -np.inf
        for part in parts:
            width = steps.width(flat_lo[part], flat_hi[part]) if steps.fits(flat_lo, flat_hi) else None
            low = None if width is None else width.min()
            if low is not None and low > 0:  # no scale replaced by 1: the extremes of raw are those of width, divided
                least, most = min(least, low / steps.count), max(most, width.max() / steps.count)
                continue
            raw = _raw_scale(flat_lo[part], flat_hi[part], qmin, qmax, symmetric)
            raw = np.where(raw > 0, raw, 1.0)
            least, most = min(least, raw.min()), max(most, raw.max())
        dtype = np.float16 if least >= 2.0 ** -14 and most <= 65504 / 1.01 else np.float32
    scale, zero = np.empty(lo.size, dtype), np.empty(lo.size, np.float64)
    for part in parts:
        if not steps.into(flat_lo[part], flat_hi[part], scale[part], zero[part]):
            scale[part], zero[part] = _scales_for_ranges(flat_lo[part], flat_hi[part], qmin, qmax, symmetric, dtype)
    return scale.reshape(lo.shape), zero.reshape(lo.shape)


class _Steps:
    """`_scales_for_ranges`' arithmetic for one slice of groups at a time, into buffers kept
    for the next slice and with no step that changes no value: the same operations on the same
    float64 values (a float32 range clamped to 0 is exact in float32, and converted exactly),
    in place. About half of the time of the whole-array steps, each of which allocated its
    result (a 1.36B decoder's int4 blocks: 42M groups, 14% of quantizing a weight)."""

    def __init__(self, qmin: int, qmax: int, symmetric: bool):
        self.qmin, self.qmax, self.symmetric = qmin, qmax, symmetric
        self.centre = 0 if qmin < 0 else (qmax + qmin + 1) // 2
        self.count = qmax - self.centre if symmetric else qmax - qmin
        self.buffers: dict = {}

    def _buffer(self, name: str, size: int, dtype) -> np.ndarray:
        b = self.buffers.get(name)
        if b is None or b.size < size or b.dtype != dtype:
            b = self.buffers[name] = np.empty(max(size, GROUP_CHUNK), dtype)
        return b[:size]

    @staticmethod
    def fits(lo: np.ndarray, hi: np.ndarray) -> bool:
        """Whether these steps take the ranges (float32 or float64; else the whole-array ones)."""
        return lo.dtype in (np.float32, np.float64) and hi.dtype in (np.float32, np.float64)

    def width(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Each group's float64 (hi - lo) (symmetric: max(-lo, hi)), lo clamped to <= 0 and hi to
        >= 0: the numerator of _raw_scale's division, the same bits."""
        n = lo.size
        a = self._buffer("lo", n, lo.dtype)
        b = self._buffer("hi", n, hi.dtype)
        np.minimum(lo, 0.0, out=a)
        np.maximum(hi, 0.0, out=b)
        w = self._buffer("width", n, np.float64)
        if self.symmetric:
            np.negative(a, out=a)
            np.maximum(a, b, out=w, dtype=np.float64)
        else:
            np.subtract(b, a, out=w, dtype=np.float64)
        return w

    def into(self, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> bool:
        """`_scales_for_ranges(lo, hi, ..., dtype)` into scale and zero; False (nothing
        written) where a group's scale is not positive (NaN, or a constant group's 0: the
        whole-array steps handle those) or the ranges are not float32/float64."""
        if not self.fits(lo, hi):
            return False
        w = self.width(lo, hi)
        np.divide(w, self.count, out=w)  # the exact scale
        if not w.min() > 0:
            return False
        np.copyto(scale, w, casting="unsafe")  # astype(dtype)
        bits = scale.view(np.int32 if scale.dtype == np.float32 else np.int16)
        below = self._buffer("below", w.size, bool)
        np.less(scale, w, out=below)
        np.add(bits, below, out=bits, casting="unsafe")  # _round_up
        if self.symmetric:
            zero[...] = float(self.centre)
            return True
        a = self._buffer("lo", w.size, lo.dtype)  # min(lo, 0), from width()
        np.divide(a, scale, out=zero, dtype=np.float64)  # lo / scale.astype(float64)
        np.subtract(self.qmin, zero, out=zero)
        np.rint(zero, out=zero)  # np.round's, with no decimals
        np.clip(zero, self.qmin, self.qmax, out=zero)
        return True


def _raw_scale(lo, hi, qmin: int, qmax: int, symmetric: bool) -> np.ndarray:
    """The float64 scale of each group before it is stored (`_scales_for_ranges`' arithmetic)."""
    lo = np.minimum(np.asarray(lo, np.float64), 0.0)
    hi = np.maximum(np.asarray(hi, np.float64), 0.0)
    if symmetric:
        centre = 0 if qmin < 0 else (qmax + qmin + 1) // 2
        return np.maximum(-lo, hi) / (qmax - centre)
    return (hi - lo) / (qmax - qmin)


def _scales_for_ranges(lo, hi, qmin: int, qmax: int, symmetric: bool, half_scales: bool | type = False):
    lo = np.minimum(np.asarray(lo, np.float64), 0.0)  # zero must be exactly representable
    hi = np.maximum(np.asarray(hi, np.float64), 0.0)
    if symmetric:
        amax = np.maximum(-lo, hi)
        centre = 0 if qmin < 0 else (qmax + qmin + 1) // 2  # unsigned: zero point at the centre
        scale = stored_scale(amax / (qmax - centre), half_scales)
        return scale, np.full(scale.shape, float(centre))
    scale = stored_scale((hi - lo) / (qmax - qmin), half_scales)
    return scale, np.clip(np.round(qmin - lo / scale.astype(np.float64)), qmin, qmax)


def scale_dtype(scale: np.ndarray, half: bool) -> type:
    """float16 if asked and every scale is a normal float16 value (with room for rounding
    up), else float32."""
    return _positive_scale_dtype(np.where(scale > 0, scale, 1.0), half)


def _positive_scale_dtype(scale: np.ndarray, half: bool) -> type:
    return np.float16 if half and scale.min() >= 2.0 ** -14 and scale.max() <= 65504 / 1.01 else np.float32


def stored_scale(scale: np.ndarray, half: bool | type) -> np.ndarray:
    """Scales as stored (`scale_dtype`, or the type given); rounded up, so that the range
    still fits in the integers. Constant groups (scale 0) get 1, so that no 0 or NaN appears."""
    scale = np.where(scale > 0, scale, 1.0)
    dtype = half if isinstance(half, type) else _positive_scale_dtype(scale, half)
    stored = np.asarray(scale.astype(dtype))
    _round_up(stored, scale)
    return stored


def _round_up(stored: np.ndarray, exact: np.ndarray) -> None:
    """np.nextafter(stored, inf) in place where stored < exact, as an integer add on the bits:
    one step up for a positive float (stored >= 0, as every scale is)."""
    bits = stored.view(np.int32 if stored.dtype == np.float32 else np.int16)
    np.add(bits, stored < exact, out=bits, casting="unsafe")
