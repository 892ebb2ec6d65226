"""scaled's channels of zeros (`_flat_channels_without_zero_point`): found by ruling channels out
on their first values and then on more of them in turn, they must be exactly the channels whose
integers all equal a non-zero zero point, as a comparison of every integer finds them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from onnxsurgery.quantization.lowerings.scaled import _flat_channels_without_zero_point
from onnxsurgery.quantization.rounding import quantize


def _every_integer(qt):
    """The same result by the definition: every integer of a channel compared with its zero point."""
    z = qt.zero_point.reshape(-1)
    rows = np.moveaxis(qt.q, qt.axis, 0).reshape(z.size, -1)
    flat = (rows == z[:, None].astype(rows.dtype)).all(axis=1) & (z != 0)
    q, zero_point = qt.q.copy(), qt.zero_point.copy()
    np.moveaxis(q, qt.axis, 0)[flat] = 0
    zero_point.reshape(-1)[flat] = 0
    return q, zero_point, flat


@pytest.mark.parametrize("shape, axis", [((300, 70), 1), ((70, 300), 0), ((16, 8, 3, 3), 0), ((16, 24, 3, 3), 1),
                                         ((1000, 40), 1)])
def test_flat_channels_are_those_of_every_integer(shape, axis):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    qt = quantize(x, dtype="uint8", granularity="channel", axis=axis, symmetric=False)
    channels = shape[axis]
    along = np.moveaxis(qt.q, axis, 0)
    z = qt.zero_point.reshape(-1).copy()
    z[: channels // 3] = 100  # a third of the channels flat: all their integers at the zero point
    along[: channels // 3] = 100
    late = channels // 3  # equal to its zero point in its first 50 values, not in its last
    z[late] = 90
    along[late] = 90
    along[(late,) + (-1,) * (along.ndim - 1)] = 91
    z[late + 1], along[late + 1] = 0, 0  # flat at a zero point of 0: nothing to change
    qt = dataclasses.replace(qt, zero_point=z.reshape(qt.zero_point.shape))
    q, zero_point, flat = _every_integer(qt)
    assert flat.sum() == channels // 3
    found = _flat_channels_without_zero_point(qt)
    assert np.array_equal(found.q, q) and np.array_equal(found.zero_point, zero_point)


def test_no_flat_channel_leaves_the_result_as_it_was():
    x = np.random.default_rng(3).standard_normal((64, 48)).astype(np.float32)
    qt = quantize(x, dtype="uint8", granularity="channel", axis=1, symmetric=False)
    assert _flat_channels_without_zero_point(qt) is qt
