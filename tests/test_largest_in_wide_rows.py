"""balanced.largest_in_rows on rows wide enough to be sampled first (SAMPLE_STEP): the same
values as largest() row by row, in row-major order, whatever the sample's bound."""

import numpy as np

from onnxsurgery.quantization.balanced import SAMPLE_STEP, largest, largest_in_rows


def test_wide_rows_pick_what_one_at_a_time_picks():
    rng = np.random.default_rng(3)
    for trial in range(30):
        rows, counts_top = int(rng.integers(1, 24)), int(rng.integers(2, 40))
        members = int(rng.integers(4 * SAMPLE_STEP * counts_top, 4 * SAMPLE_STEP * counts_top + 2000))
        values = (rng.random((rows, members), dtype=np.float32) - 0.5)
        if trial % 3 == 0:
            values = np.round(values * 8) / 8  # many ties, at the bound too
        if trial % 4 == 0:
            values[rng.random((rows, members)) < rng.random()] = -np.inf  # a row mostly -inf: all candidates
        counts = rng.integers(1, counts_top + 1, rows)
        got_rows, got_cols = largest_in_rows(values, counts)
        want = [(r, c) for r in range(rows) for c in sorted(largest(values[r], int(counts[r])).tolist())]
        assert list(zip(got_rows.tolist(), got_cols.tolist())) == want
