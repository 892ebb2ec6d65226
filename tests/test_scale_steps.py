"""scales.scales_for_ranges over many groups (a slice of GROUP_CHUNK at a time, in place:
scales._Steps) gives the bits of the whole-array steps (scales._scales_for_ranges), the
storage type decided over every group, for every form a range can take: constant groups,
NaN, ranges of either sign, float64 ranges (the clip search's), every integer type."""

import numpy as np
import pytest

from onnxsurgery.quantization import scales


def whole(lo, hi, qmin, qmax, symmetric, half):
    """The steps over all groups at once (no slices): the reference."""
    if half is True:
        raw = scales._raw_scale(lo, hi, qmin, qmax, symmetric)
        half = scales._positive_scale_dtype(np.where(raw > 0, raw, 1.0), True)
    return scales._scales_for_ranges(lo, hi, qmin, qmax, symmetric, half)


@pytest.mark.parametrize("form", ["normal", "constant groups", "one sign", "float64", "nan", "tiny", "huge"])
@pytest.mark.parametrize("qmin,qmax", [(0, 15), (-8, 7), (0, 255), (-128, 127)])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("half", [False, True, np.float16])
def test_sliced_scales_are_the_whole_array_steps(form, qmin, qmax, symmetric, half):
    rng = np.random.default_rng(3)
    shape = (3, scales.GROUP_CHUNK // 2 + 5)  # two slices and a short one
    size = {"tiny": 1e-7, "huge": 1e5}.get(form, 0.02)
    lo = (rng.standard_normal(shape) * size).astype(np.float32)
    hi = lo + np.abs(rng.standard_normal(shape) * size).astype(np.float32)
    if form == "constant groups":
        lo[1, :50], hi[1, :50] = 0.0, 0.0
        lo[2, :3], hi[2, :3] = -0.0, -0.0
    elif form == "one sign":
        lo = np.abs(lo)
        hi = lo + np.float32(size)
    elif form == "float64":
        lo, hi = lo.astype(np.float64) * 0.85, hi.astype(np.float64) * 0.85  # as the clip search makes them
    elif form == "nan":
        lo[0, 7] = np.nan
    with np.errstate(all="ignore"):
        got = scales.scales_for_ranges(lo, hi, qmin, qmax, symmetric, half)
        want = whole(lo, hi, qmin, qmax, symmetric, half)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()
