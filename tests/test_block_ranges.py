"""chunked.block_ranges: blocks along the last axis reduced from a transposed copy of each slice
give numpy's own min and max, bit for bit (signed zeros and NaN included)."""

import numpy as np
import pytest

from onnxsurgery.quantization import chunked


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 1000)  # many slices, the last one short


@pytest.mark.parametrize("shape", [(300, 6, 32), (7, 5, 16), (3, 4, 5, 8), (50, 2, 2)])
@pytest.mark.parametrize("kind", ["normal", "zeros", "nan"])
def test_blocks_along_the_last_axis_match_numpy(shape, kind):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "zeros":
        x[rng.random(shape) < 0.5] = 0.0
        x[rng.random(shape) < 0.3] = -0.0
    if kind == "nan":
        x[(0,) * x.ndim] = np.nan
    lo, hi = chunked.block_ranges(x, x.ndim - 1)
    assert lo.tobytes() == x.min(axis=-1).tobytes() and hi.tobytes() == x.max(axis=-1).tobytes()


def test_blocks_along_a_middle_axis_match_numpy():
    x = np.random.default_rng(7).standard_normal((8, 32, 300)).astype(np.float32)
    lo, hi = chunked.block_ranges(x, 1)
    assert lo.tobytes() == x.min(axis=1).tobytes() and hi.tobytes() == x.max(axis=1).tobytes()


@pytest.mark.parametrize("shape,axis", [((300, 70), 1), ((40, 300), 1), ((5, 4, 33, 6), 2), ((64, 3, 3, 3), 1)])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_channel_ranges_along_another_axis_fold_slices_as_one_thread(monkeypatch, shape, axis, workers):
    """Threads taking ranges of channels through every slice give one thread's bits (signed
    zeros included), with and without a divisor along axis 0."""
    monkeypatch.setattr(chunked, "_workers", lambda: workers)
    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < 0.3] = -0.0
    for divisor in (None, rng.uniform(0.5, 2, (shape[0],) + (1,) * (len(shape) - 1)).astype(np.float32)):
        y = x if divisor is None else x / divisor
        others = tuple(a for a in range(len(shape)) if a != axis)
        want_lo, want_hi = y.min(axis=others), y.max(axis=others)
        lo, hi = chunked.channel_ranges(x, axis, divisor)
        assert (lo == want_lo).all() and (hi == want_hi).all()
        monkeypatch.setattr(chunked, "_workers", lambda: 1)
        one = chunked.channel_ranges(x, axis, divisor)
        monkeypatch.setattr(chunked, "_workers", lambda: workers)
        assert lo.tobytes() == one[0].tobytes() and hi.tobytes() == one[1].tobytes()
