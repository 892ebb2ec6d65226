"""rounding.within_grid: the clip is skipped only where it would change no bit (issue 58)."""

import numpy as np
import pytest

from onnxsurgery.quantization import chunked, rounding
from onnxsurgery.quantization.rounding import quantize, within_grid


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 1000)


CASES = [
    dict(dtype="int8", granularity="channel", axis=0, symmetric=False),
    dict(dtype="uint8", granularity="channel", axis=1, symmetric=False, half_scales=True),
    dict(dtype="int8", granularity="block", axis=1, block_size=32, symmetric=True),
    dict(dtype="uint4", granularity="block", axis=0, block_size=16, symmetric=False),
    dict(dtype="int4", granularity="channel", axis=0, symmetric=True, search_clip=True),  # narrowed: clips
    dict(dtype="int8", granularity="tensor", symmetric=False),
]


@pytest.mark.parametrize("kw", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_skipping_the_clip_gives_the_clipped_bits(monkeypatch, kw, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((96, 64)) * [0.01, 1.0, 300.0, 1e-30][seed]).astype(np.float32)
    x[5, 7] *= 40  # an outlier
    divisor = (rng.random((96, 1)) + 0.5).astype(np.float32) if kw["granularity"] == "channel" else None
    found = quantize(x, divisor=divisor, **kw)
    monkeypatch.setattr(rounding, "within_grid", lambda *a: False)
    clipped = quantize(x, divisor=divisor, **kw)
    assert found.q.tobytes() == clipped.q.tobytes()
    assert (found.sums and found.sums[2]) == (clipped.sums and clipped.sums[2])  # the error measured as it rounded


def test_within_grid_rejects_what_would_clip():
    lo, hi = np.float32([-1.0, 0.0]), np.float32([1.0, 2.0])
    s = np.float32([[1 / 127], [2 / 127]])
    assert within_grid((lo, hi), s, None, -128, 127)
    assert not within_grid((lo, hi), s * np.float32(0.9), None, -128, 127)  # a narrowed (searched) range
    assert not within_grid((lo, hi), s, np.float32([[1], [1]]), -128, 127)  # 127 + 1
    assert not within_grid((lo, hi), np.float32([[0], [1]]), None, -128, 127)  # not positive
    assert not within_grid((lo.astype(np.float64), hi), s, None, -128, 127)  # not float32
    assert not within_grid((np.float32([np.nan, 0]), hi), s, None, -128, 127)
    assert not within_grid((lo, hi), np.float32([1e-45, 1]).reshape(2, 1), None, -128, 127)  # inf after /


def test_the_clip_is_skipped_for_an_exact_range(monkeypatch):
    seen = []
    monkeypatch.setattr(chunked, "_clip", lambda q, lo, hi, out: seen.append(1) or np.clip(q, lo, hi, out=out))
    x = np.random.default_rng(0).standard_normal((64, 80)).astype(np.float32)
    quantize(x, dtype="int8", granularity="channel", axis=0, symmetric=False)
    assert not seen
    quantize(x, dtype="int4", granularity="channel", axis=0, symmetric=True, search_clip=True)
    assert seen
