"""The weight error measured while rounding (chunked.round_to_grid's `error_into`): the bits of
chunked.error_sums' own pass, taken only for the array that was rounded."""

import numpy as np
import pytest

from onnxsurgery.quantization import chunked
from onnxsurgery.quantization.rounding import quantize, weight_error


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_ELEMENTS", 1000)  # many slices, some rows split unevenly


@pytest.mark.parametrize("granularity,axis,block_size", [("channel", 0, None), ("channel", 1, None),
                                                         ("block", 1, 32), ("block", 0, 32), ("tensor", None, None)])
@pytest.mark.parametrize("symmetric,half_scales,divided", [(True, False, False), (False, True, False),
                                                           (True, False, True), (False, False, True)])
def test_error_measured_while_rounding_is_the_separate_pass(granularity, axis, block_size, symmetric, half_scales,
                                                            divided):
    """weight_error takes the figures round_to_grid measured on its slices: the bits of
    error_sums' own pass over the stored integers, and only for the array that was rounded."""
    from onnxsurgery.quantization.rounding import _grouped
    rng = np.random.default_rng(4)
    x = rng.standard_normal((96, 160)).astype(np.float32)
    r = rng.uniform(0.5, 2.0, 160).astype(np.float32) if divided and granularity == "channel" else None
    qt = quantize(x, granularity=granularity, axis=axis, block_size=block_size, symmetric=symmetric,
                  half_scales=half_scales, divisor=None if r is None else r.reshape(1, -1))
    if r is not None:
        qt.input_scale, qt.input_axis = r, 1
    assert qt.sums is not None
    separate = chunked.error_sums(x, qt, _grouped)
    assert qt.sums[2] == separate
    err = weight_error(x, qt)
    assert err["max_abs_error"] == separate[2] and err["rel_l2_error"] == float(np.sqrt(separate[0] / separate[1]))
    other = x.copy()
    other[0, 0] += 1.0  # another array: measured on its own
    assert weight_error(other, qt) != err


def test_error_not_measured_where_known_is_measured_apart_alike():
    from onnxsurgery.quantization.rounding import _grouped
    x = np.random.default_rng(5).standard_normal((64, 300)).astype(np.float32)
    known, unmeasured = quantize(x, symmetric=False), quantize(x, symmetric=False, error=False)
    assert unmeasured.sums is None and unmeasured.q.tobytes() == known.q.tobytes()
    assert weight_error(x, unmeasured) == weight_error(x, known)
    assert known.sums[2] == chunked.error_sums(x, unmeasured, _grouped)
