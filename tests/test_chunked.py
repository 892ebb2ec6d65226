"""quantization/chunked.py: a slice of rows at a time gives the whole-array steps' bits."""

import numpy as np
import pytest

from onnxsurgery.quantization import chunked
from onnxsurgery.quantization.rounding import quantize, weight_error


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 1000)  # many slices, some rows split unevenly


@pytest.mark.parametrize("shape", [(300, 70), (70, 300), (5, 4, 33, 6), (1, 5000)])
def test_round_to_grid_matches_whole_array(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    s = rng.uniform(0.01, 0.1, (shape[0],) + (1,) * (len(shape) - 1)).astype(np.float16)
    z = np.float32(3.0)
    whole = np.clip(np.rint(x / s + z), -8, 7).astype(np.int8)
    assert chunked.round_to_grid(x, s, z, -8, 7, np.int8).tobytes() == whole.tobytes()


@pytest.mark.parametrize("shape", [(300, 70), (5, 4, 33, 6), (2000,)])
def test_ranges_and_maxima_match_numpy(shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for axis in range(len(shape)):
        others = tuple(a for a in range(len(shape)) if a != axis)
        lo, hi = chunked.channel_ranges(x, axis)
        assert lo.tobytes() == x.min(axis=others).tobytes() and hi.tobytes() == x.max(axis=others).tobytes()
        assert chunked.abs_max(x, axis).tobytes() == np.abs(x).max(axis=others).tobytes()
    assert chunked.all_finite(x) and not chunked.all_finite(np.where(x > 2, np.inf, x))


@pytest.mark.parametrize("granularity,block_size", [("channel", None), ("block", 32)])
@pytest.mark.parametrize("axis", [0, 1])
def test_divisor_is_quantizing_the_divided_weight(granularity, block_size, axis):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((96, 160)).astype(np.float32)
    r = rng.uniform(0.5, 2.0, (96, 1)).astype(np.float32)
    for symmetric in (True, False):
        args = dict(granularity=granularity, axis=axis, block_size=block_size, symmetric=symmetric)
        a, b = quantize(x / r, **args), quantize(x, divisor=r, **args)
        assert a.q.tobytes() == b.q.tobytes() and a.scale.tobytes() == b.scale.tobytes()


def test_weight_error_with_input_scale_matches_dequantize():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    qt = quantize(x, dtype="int4", granularity="block", axis=0, block_size=32, symmetric=False, search_clip=True)
    qt.input_scale, qt.input_axis = rng.uniform(0.5, 2, 64).astype(np.float32), 0
    diff = qt.dequantize().ravel() - x.ravel()
    err = weight_error(x, qt)
    assert err["max_abs_error"] == float(np.abs(diff).max())
    assert err["rel_l2_error"] == float(np.sqrt(float(np.dot(diff, diff)) / float(np.dot(x.ravel(), x.ravel()))))
