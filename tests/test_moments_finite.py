"""Calibration rows holding inf or NaN are left out of H. A 16-bit original that overflows on a
sample (oww_melspectrogram's float16 variant, zoo11) gave rows of inf: H became inf everywhere,
every measured choice compared NaN costs, and numpy's overflow warning reached the user."""

import warnings
import numpy as np

from onnxsurgery.quantization.moments import Moments, Waiting


class _Reading:  # what Waiting reads of a weight's reading: its input width
    def __init__(self, k: int):
        self.k = k


def _h(rows: np.ndarray) -> np.ndarray:
    reading = _Reading(rows.shape[1])
    cache = {reading: Moments(reading.k, folds=1)}
    waiting = Waiting(cache)
    waiting.add(reading, 0, rows, 1.0)
    waiting.flush()
    return cache[reading].total


def test_rows_with_inf_or_nan_are_left_out_of_h():
    rng = np.random.default_rng(0)
    good = rng.standard_normal((300, 16)).astype(np.float32)
    bad = good.copy()
    bad[3, 5], bad[7, 0] = np.inf, np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = _h(bad)
    assert np.isfinite(h).all()
    kept = np.delete(good, [3, 7], axis=0)
    assert np.allclose(h, kept.T.astype(np.float64) @ kept, rtol=1e-5, atol=1e-3)  # a float32 product
    assert not np.allclose(h, _h(good), rtol=1e-5, atol=1e-3)  # the two rows are really gone
