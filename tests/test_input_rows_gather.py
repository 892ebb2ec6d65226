"""The sampled windows of a Conv's input, gathered from the input itself (input_rows._positions),
are the rows the padded view gives (input_rows._patches), in the same order, bit for bit."""

import itertools

import numpy as np
import pytest

from onnxsurgery.quantization import input_rows


@pytest.mark.parametrize("spatial", [(11,), (7, 10)])
def test_gathered_windows_are_the_padded_views(spatial):
    rng = np.random.default_rng(0)
    r = len(spatial)
    checked = 0
    for k, stride, dilation, pad, batch in itertools.product((1, 3), (1, 2), (1, 2), (0, 1, 2), (1, 2)):
        x = rng.standard_normal((batch, 5) + spatial).astype(np.float32)
        x[0, 0, 0] = -0.0  # kept as it is; the padding's zeros are +0.0 either way
        shape = (4, 5) + (k,) * r
        reader = input_rows.Reader("x", "Conv", {"strides": [stride] * r, "dilations": [dilation] * r,
                                                  "pads": [pad, pad + 1] * r if r == 1 else [pad] * 2 * r})
        out = input_rows._Geometry.of(x.shape, reader, shape).out
        if min(out) < 1:
            continue
        patches, _ = input_rows._patches(x, reader, shape)
        for max_rows in (3, 17):
            positions = int(np.prod(out))
            if batch * positions <= max_rows:  # every row: the padded view's path
                continue
            _, parts = input_rows.sampled_columns(x, reader, shape, max_rows)
            chosen = np.unravel_index(input_rows._subset(positions, -(-max_rows // batch)), out)
            expected = np.concatenate([patches[i][chosen].reshape(-1, 5 * k ** r) for i in range(batch)])
            got = np.concatenate(list(parts))
            assert got.shape == expected.shape and got.tobytes() == expected.tobytes()
            checked += 1
    assert checked > 20
