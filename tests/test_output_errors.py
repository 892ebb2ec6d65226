"""output_errors._float_errors: the figures over finite outputs (its quick path) are those of
the whole computation in float64, and NaN, infinity and overflowing squares still take the
careful one."""

from __future__ import annotations

import numpy as np


def _plain(a, b):
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(np.abs(x - y).max()), float(x @ x), float((x - y) @ (x - y)), float(y @ y)


def test_finite_outputs_give_the_float64_figures():
    from onnxsurgery.running import output_errors

    rng = np.random.default_rng(0)
    a = rng.standard_normal(output_errors._ERROR_BLOCK * 2 + 17).astype(np.float32)
    b = a + rng.standard_normal(a.shape).astype(np.float32) * 1e-3
    got, want = output_errors._float_errors(a, b), _plain(a, b)
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-12)


def test_not_finite_and_overflowing_values_take_the_careful_path():
    from onnxsurgery.running.output_errors import compare_outputs

    a = np.array([1.0, np.nan, np.inf, 3.0], np.float32)
    same = compare_outputs([a], [np.array([1.5, np.nan, np.inf, 2.0], np.float32)], ["y"])["y"]
    # a NaN and an infinity both hold at the same place: equal
    assert same["max_abs_error"] == 1.0 and abs(same["rel_l2_error"] - np.sqrt(1.25 / 10)) < 1e-15
    other = compare_outputs([a], [np.array([1.5, 0.0, np.inf, 2.0], np.float32)], ["y"])["y"]
    assert np.isnan(other["rel_l2_error"])
    huge = compare_outputs([np.array([3e38, 1], np.float32)], [np.array([-3e38, 1], np.float32)], ["y"])["y"]
    assert huge["max_abs_error"] == np.float64(np.float32(3e38)) * 2 and huge["rel_l2_error"] == 2.0


def test_counts_and_exactness_over_large_outputs():
    """not_finite is counted wherever a block is not all finite, and is 0 where every value of
    both is (the quick path's sums say so without a pass of its own); `exact` is the bytes'
    equality, whether the first difference is in the leading slice or far past it."""
    from onnxsurgery.running import output_errors
    from onnxsurgery.running.output_errors import compare_outputs

    rng = np.random.default_rng(1)
    a = rng.standard_normal(output_errors._ERROR_BLOCK * 2 + 5).astype(np.float32)
    b = a.copy()
    assert compare_outputs([a], [b], ["y"])["y"]["exact"]
    b[-1] += 1
    late = compare_outputs([a], [b], ["y"])["y"]
    assert not late["exact"] and late["not_finite"] == 0 and abs(late["max_abs_error"] - 1) < 1e-6
    b[0] = np.float32(-0.0) if a[0] == 0 else a[0]
    b[output_errors._ERROR_BLOCK + 3] = np.nan  # in the second block, where the reference has a number
    b[7] = np.inf
    counted = compare_outputs([a], [b], ["y"])["y"]
    assert counted["not_finite"] == 2 and not counted["exact"] and np.isnan(counted["rel_l2_error"])
    c = a.copy()
    c[9] = np.nan  # NaN at the same place in both: equal, counted as nothing
    both = compare_outputs([c], [c.copy()], ["y"])["y"]
    assert both["exact"] and both["not_finite"] == 0
    assert not compare_outputs([a], [a.astype(np.float64)], ["y"])["y"]["exact"]
    assert not compare_outputs([a], [a.reshape(1, -1)], ["y"])["y"]["exact"]
