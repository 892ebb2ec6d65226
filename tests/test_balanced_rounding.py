"""Balanced rounding (balanced.balance) picks the same values to move whichever way it picks
them: one argmax a move where a group needs few, a partition where it needs many."""

import numpy as np
import pytest

from onnxsurgery.quantization import balanced


def _one_argmax_a_move(q, residual, axis, members_along_axis, qmin, qmax):
    """The definition: in each group, while it still needs moves, the value with the largest
    score (the first of equals) moves one step the group's way."""
    q_rows = np.moveaxis(q, axis, -1 if members_along_axis else 0)
    r_rows = np.moveaxis(residual, axis, -1 if members_along_axis else 0)
    shape2d = (-1, q.shape[axis]) if members_along_axis else (q.shape[axis], -1)
    q2d, score = q_rows.reshape(shape2d).copy(), r_rows.reshape(shape2d).copy()
    for row in range(q2d.shape[0]):
        k = int(np.rint(score[row].sum(dtype=np.float64)))
        sign = np.sign(k)
        s = score[row] * sign
        s[(q2d[row] >= qmax) & (sign > 0) | (q2d[row] <= qmin) & (sign < 0)] = -np.inf
        for _ in range(abs(k)):
            i = int(s.argmax())
            if s[i] == -np.inf:
                break
            q2d[row, i] += sign
            s[i] = -np.inf
    q_rows[...] = q2d.reshape(q_rows.shape)


@pytest.mark.parametrize("seed", range(8))
def test_the_values_moved_are_those_of_one_argmax_a_move(seed):
    rng = np.random.default_rng(seed)
    groups, members = int(rng.integers(4, 30)), int(rng.integers(200, 2000))
    # half the groups close to the grid (a few moves each), half far from it (many)
    spread = np.where(np.arange(groups) < groups // 2, 0.02, 0.5)[:, None]
    x = np.rint(rng.standard_normal((groups, members)) * 4) + rng.uniform(-1, 1, (groups, members)) * spread
    if seed % 2:  # repeated values: equal scores, where the order of picking shows
        x = np.round(x * 4) / 4
    along = bool(seed % 4 < 2)  # groups as blocks (members along the axis) or as channels
    axis = 1 if along else 0
    x = x.astype(np.float32)
    q = np.clip(np.rint(x), -7, 7).astype(np.float32)
    residual = (x - np.rint(x)).astype(np.float32)
    got, want = q.copy(), q.copy()
    balanced.balance(got, residual.copy(), axis, along, -7, 7)
    _one_argmax_a_move(want, residual.copy(), axis, along, -7, 7)
    assert np.array_equal(got, want)
    needed = np.abs(np.rint(residual.sum(axis=1, dtype=np.float64)))
    assert needed.max() > balanced.FEW_MOVES >= needed.min()  # both ways of picking taken


@pytest.mark.parametrize("shape,axis", [((40, 8, 32, 6), 2), ((24, 32, 7), 1), ((33, 3, 16, 5, 1), 2)])
def test_blocks_balanced_in_shared_slices_move_the_values_of_the_whole_array(shape, axis, monkeypatch):
    """Blocks are balanced a slice along axis 0 at a time, on several threads: the values the
    whole array's rows moved (repeated values included, where the order of picking shows)."""
    from onnxsurgery.quantization import chunked

    rng = np.random.default_rng(11)
    x = np.round((rng.standard_normal(shape) * 4 + rng.uniform(-1, 1, shape) * 0.3) * 4) / 4
    x = x.astype(np.float32)
    q0 = np.clip(np.rint(x), -8, 7)
    want_q, want_r = q0.copy(), x - q0
    balanced._balance_rows(want_q, want_r.copy(), axis, True, -8, 7)
    _one_argmax_a_move(q := q0.copy(), x - q0, axis, True, -8, 7)
    assert want_q.tobytes() == q.tobytes()
    monkeypatch.setattr(balanced, "SLICE_ELEMENTS", 1000)
    monkeypatch.setattr(balanced, "SUM_BUFFER", 64)
    for workers in (1, 3):
        monkeypatch.setattr(chunked, "_workers", lambda w=workers: w)
        monkeypatch.setattr(chunked, "_POOL", None)
        got = q0.copy()
        balanced.balance(got, x - q0, axis, True, -8, 7)
        assert got.tobytes() == want_q.tobytes()
    assert (want_q != q0).any()


@pytest.mark.parametrize("shape,axis,symmetric",
                         [((96, 40), 0, False), ((40, 96), 1, True), ((24, 64, 3, 3), 1, False)])
def test_quantize_balanced_in_slices_gives_the_whole_array_integers(shape, axis, symmetric, monkeypatch):
    """rounding.quantize's balanced blocks are rounded and balanced a slice at a time, on several
    threads (balanced.round_balanced): the integers of the whole-array steps."""
    from onnxsurgery.quantization import chunked
    from onnxsurgery.quantization.rounding import _grouped, quantize

    x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
    monkeypatch.setattr(balanced, "SLICE_ELEMENTS", 500)
    monkeypatch.setattr(balanced, "SUM_BUFFER", 32)
    monkeypatch.setattr(chunked, "_workers", lambda: 3)
    monkeypatch.setattr(chunked, "_POOL", None)
    got = quantize(x, dtype="int4", granularity="block", axis=axis, block_size=8, symmetric=symmetric, balanced=True)
    zero = got.zero_point.astype(np.float32) if got.zero_point is not None else np.zeros_like(got.scale)
    view, s_b, z_b = _grouped(x, got.scale.astype(np.float32), zero, "block", axis, 8)
    q = view / s_b + (z_b if not symmetric else 0)
    exact = q.copy()
    q = np.clip(np.rint(q), -8, 7)
    exact -= q
    balanced._balance_rows(q, exact, axis + 1, True, -8, 7)
    assert got.q.tobytes() == q.astype(np.int8).reshape(shape).tobytes()
    assert (q != np.clip(np.rint(view / s_b + (z_b if not symmetric else 0)), -8, 7)).any()  # some moved


def test_groups_of_many_moves_pick_at_once_what_one_at_a_time_picks():
    # balanced.largest_in_rows: every row's count largest values, ties to the lower index,
    # -inf never: what largest() picks row by row
    from onnxsurgery.quantization.balanced import largest, largest_in_rows
    rng = np.random.default_rng(0)
    for trial in range(40):
        rows, members = int(rng.integers(1, 40)), int(rng.integers(2, 300))
        values = rng.standard_normal((rows, members)).astype(np.float32)
        if trial % 3 == 0:
            values = np.round(values * 4) / 4  # ties
        if trial % 5 == 0:
            values[rng.random((rows, members)) < 0.3] = -np.inf
        counts = rng.integers(9, members + 10, rows)
        got = set(zip(*(a.tolist() for a in largest_in_rows(values, counts))))
        assert got == {(r, c) for r in range(rows) for c in largest(values[r], int(counts[r])).tolist()}
