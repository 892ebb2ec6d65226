"""quantization/chunked.py: a slice of rows at a time gives the whole-array steps' bits."""

import numpy as np
import pytest

from onnxsurgery.quantization import chunked, clip_search, rounding
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


@pytest.mark.parametrize("shape", [(300, 70), (7, 900), (1, 5)])
def test_maxima_with_ranges_are_the_two_passes(shape):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    x[0] = 0.0  # a zero row: its scale is 1

    def scales_of(m):
        return np.where(m > 0, m.astype(np.float64) ** 0.5, 1.0).astype(np.float32)

    maxima, lo, hi = chunked.abs_max_with_ranges(x, scales_of)
    assert maxima.tobytes() == np.abs(x).max(axis=1).tobytes()
    quotient = x / scales_of(np.abs(x).max(axis=1)).reshape(-1, 1)
    assert lo.tobytes() == quotient.min(axis=0).tobytes() and hi.tobytes() == quotient.max(axis=0).tobytes()


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


@pytest.mark.parametrize("shape,axis", [((64, 96), 0), ((96, 64), 1), ((32, 2000), 0)])
def test_weight_error_with_input_scale_matches_dequantize(shape, axis):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    qt = quantize(x, dtype="int4", granularity="block", axis=axis, block_size=32, symmetric=False, search_clip=True)
    qt.input_scale, qt.input_axis = rng.uniform(0.5, 2, shape[0]).astype(np.float32), 0
    diff = qt.dequantize().ravel() - x.ravel()
    err = weight_error(x, qt)
    assert err["max_abs_error"] == float(np.abs(diff).max())
    d64, x64 = diff.astype(np.float64), x.ravel().astype(np.float64)  # tiles' float32 dots summed in float64
    assert err["rel_l2_error"] == pytest.approx(float(np.sqrt(np.dot(d64, d64) / np.dot(x64, x64))), rel=1e-6)


def _clip_reference(x, lo, hi, symmetric, granularity, axis, block_size, importance):
    """clip_search._clip_ranges as it was: one whole-array pass per ratio, float64 sums."""
    from onnxsurgery.quantization.rounding import CLIP_RATIOS, _grouped
    from onnxsurgery.quantization.scales import scales_for_ranges
    best_err = best_ratio = None
    for ratio in CLIP_RATIOS:
        scale, zero = scales_for_ranges(lo * ratio, hi * ratio, -8, 7, symmetric, False)
        view, s_b, z_b = _grouped(x, scale.astype(np.float32), zero.astype(np.float32), granularity, axis, block_size)
        q = np.empty(view.shape, np.float32)
        clip_search.clipped_error(view, s_b, None if symmetric else z_b, -8, 7, importance, q)
        members = (axis + 1,) if granularity == "block" else tuple(a for a in range(x.ndim) if a != axis)
        err = q.sum(axis=members, dtype=np.float64).reshape(np.shape(lo))
        if best_err is None:
            best_err, best_ratio = err, np.ones_like(err)
        else:
            better = err < best_err
            best_err, best_ratio = np.where(better, err, best_err), np.where(better, ratio, best_ratio)
    return lo * best_ratio, hi * best_ratio


@pytest.mark.parametrize("shape,granularity,axis,block_size", [
    ((256, 96), "block", 0, 32), ((96, 256), "block", 1, 32), ((16, 64, 3, 3), "block", 1, 16),
    ((64, 48), "channel", 0, None)])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_clip_search_in_one_pass_picks_the_whole_array_ratios(shape, granularity, axis, block_size, symmetric,
                                                              weighted, monkeypatch):
    """Every ratio of a slice at once, float32 sums checked in float64 where close, on two
    threads: the ratios the one-pass-per-ratio search picked."""
    from onnxsurgery.quantization import rounding
    monkeypatch.setattr(clip_search, "CLIP_CHUNK_ELEMENTS", 7000)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(shape) * rng.standard_t(3, shape)).astype(np.float32)
    x[: shape[0] // 4] = 0  # constant groups: every ratio ties
    importance = rng.uniform(0.1, 3, (shape[0],) + (1,) * (len(shape) - 1)).astype(np.float32) if weighted else None
    lo, hi = rounding._ranges(x, granularity, axis, block_size)
    imp = None
    if importance is not None:
        imp = rounding._grouped(np.broadcast_to(importance, shape), lo, lo, granularity, axis, block_size)[0]
    want = _clip_reference(x, lo, hi, symmetric, granularity, axis, block_size, imp)
    got = clip_search._clip_ranges(x, lo, hi, -8, 7, symmetric, False, granularity, axis, block_size, importance)
    assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("granularity,axis,block_size", [("channel", 0, None), ("channel", 1, None), ("block", 0, 32),
                                                         ("block", 1, 32)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_float16_scales_round_as_the_whole_array_float16_steps(granularity, axis, block_size, symmetric):
    """quantize() divides by its float16 scales cast to float32 once (numpy casts them inside each
    broadcast ufunc otherwise, slowly): the integers and the dequantized values are those of the
    whole-array steps on the float16 scales themselves."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((128, 96)).astype(np.float32)
    qt = quantize(x, dtype="int4", granularity=granularity, axis=axis, block_size=block_size, symmetric=symmetric,
                  half_scales=True)
    assert qt.scale.dtype == np.float16
    expand = [1, 1]
    expand[axis] = -1
    if granularity == "block":
        s = np.repeat(qt.scale, block_size, axis=axis)
        z = np.repeat(qt.zero_point, block_size, axis=axis) if qt.zero_point is not None else None
    else:
        s = qt.scale.reshape(expand)
        z = qt.zero_point.reshape(expand) if qt.zero_point is not None else None
    q = x / s + (z.astype(np.float32) if z is not None else 0)
    whole = np.clip(np.rint(q), -8, 7)
    assert qt.q.tobytes() == whole.astype(qt.q.dtype).tobytes()
    back = (whole - (z.astype(np.float32) if z is not None else 0)) * s
    assert np.array_equal(qt.dequantize(), back.astype(np.float32))  # (whole's -0.0 is 0 from integers)


def test_shared_slices_give_the_bits_of_one_thread(monkeypatch):
    """round_to_grid, block_ranges, channel_ranges, abs_max, error_sums and all_finite split their
    slices among threads (chunked.share): the integers, scales, extremes and error figures are
    those of one thread."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((256, 192)).astype(np.float32)
    x[3, 5] = 40.0  # one outlier: a block's range and the largest error differ from the rest

    def run():
        found = []
        for granularity, axis in (("block", 0), ("block", 1), ("channel", 0)):
            qt = quantize(x, dtype="int4", granularity=granularity, axis=axis, block_size=32, symmetric=False,
                          half_scales=True)
            found.append((qt.q.tobytes(), qt.scale.tobytes(), qt.zero_point.tobytes(), weight_error(x, qt)))
        r = np.linspace(0.5, 2, x.shape[0], dtype=np.float32)[:, None]
        extremes = [tuple(a.tobytes() for a in chunked.channel_ranges(x, axis, divisor))
                    + (chunked.abs_max(x, axis).tobytes(),) for axis in (0, 1) for divisor in (None, r)]
        return found, extremes, chunked.all_finite(x), chunked.all_finite(np.where(x > 3.5, np.nan, x))

    monkeypatch.setattr(chunked, "_workers", lambda: 1)
    alone = run()
    monkeypatch.setattr(chunked, "_workers", lambda: 3)
    monkeypatch.setattr(chunked, "_POOL", None)
    assert run() == alone
    assert alone[2] and not alone[3]


def test_pack_nibbles_in_shared_slices_is_the_whole_array_packing():
    from onnxsurgery.quantization.packing import pack_nibbles

    q = np.random.default_rng(7).integers(-8, 8, (4 << 18) * 2 + 7).astype(np.int8)  # 5 slices, odd length
    padded = np.append(q, np.int8(0)).view(np.uint8)
    whole = (padded[1::2] << 4) | (padded[0::2] & 0x0F)
    assert pack_nibbles(q, signed=True).tobytes() == whole.astype(np.uint8).tobytes()


@pytest.mark.parametrize("shape,granularity,axis,block_size,channel_axis", [
    ((256, 96), "block", 0, 32, 1), ((96, 256), "block", 1, 32, 0), ((16, 64, 3, 3), "block", 1, 16, 0),
    ((64, 48), "channel", 0, None, 0), ((48, 64), "channel", 1, None, 1)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_picks_known_for_a_sample_of_channels_give_the_whole_search(shape, granularity, axis, block_size,
                                                                    channel_axis, symmetric, monkeypatch):
    """rounding.quantize's `known_picks`: the picks a search over some channels alone gave, and
    only the others searched (choices/symmetry.py measures a sample, the pass the whole): the
    whole weight's search, bit for bit, weighted by its input or not."""
    monkeypatch.setattr(clip_search, "CLIP_CHUNK_ELEMENTS", 7000)
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(shape) * rng.standard_t(3, shape)).astype(np.float32)
    along = [1] * len(shape)
    along[axis if granularity == "block" else 1 - channel_axis if len(shape) == 2 else 1] = -1
    importance = rng.uniform(0.1, 3, shape[axis if granularity == "block" else 1 - channel_axis]).astype(np.float32)
    channels = np.linspace(0, shape[channel_axis] - 1, shape[channel_axis] // 3).round().astype(np.int64)
    sample = np.take(x, channels, axis=channel_axis)
    for weights in (None, importance.reshape(along)):
        args = dict(dtype="int4", granularity=granularity, axis=axis, block_size=block_size, symmetric=symmetric,
                    half_scales=True, search_clip=True, importance=weights)
        whole = quantize(x, **args)
        known = (channel_axis, channels, quantize(sample, **args).clip_picks)
        got = quantize(x, known_picks=known, **args)
        assert got.clip_picks.tobytes() == whole.clip_picks.tobytes()
        assert got.q.tobytes() == whole.q.tobytes() and got.scale.tobytes() == whole.scale.tobytes()
        assert (got.zero_point is None) == symmetric
        if not symmetric:
            assert got.zero_point.tobytes() == whole.zero_point.tobytes()
        assert (whole.clip_picks > 0).any()  # the search clipped somewhere: the picks were tested


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("half_scales", [True, False])
@pytest.mark.parametrize("qmin,qmax", [(-8, 7), (0, 15)])
def test_clip_grids_at_once_are_the_bits_of_one_call_per_ratio(symmetric, half_scales, qmin, qmax):
    """clip_search._clip_grids takes every ratio in one call where the scales stay float32: the scales
    and zero points of scales_for_ranges(lo * ratio, hi * ratio) ratio by ratio, constant,
    one-signed and tiny groups included."""
    from onnxsurgery.quantization.clip_search import CLIP_RATIOS, _clip_grids
    from onnxsurgery.quantization.scales import scales_for_ranges
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((64, 40)) * rng.standard_t(3, (64, 40))).astype(np.float32)
    lo, hi = x[::2].copy(), x[1::2].copy()
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    lo[0], hi[0] = 0, 0  # constant groups
    lo[1] = np.abs(lo[1])  # all positive
    hi[2] = -np.abs(hi[2]) * 1e-30  # all negative, tiny
    scales, zeros = _clip_grids(lo, hi, qmin, qmax, symmetric, half_scales)
    for g, ratio in enumerate(CLIP_RATIOS):
        scale, zero = scales_for_ranges(lo * ratio, hi * ratio, qmin, qmax, symmetric, half_scales)
        assert scales[g].tobytes() == scale.astype(np.float32).tobytes()
        assert zeros[g].tobytes() == zero.astype(np.float32).tobytes()


@pytest.mark.parametrize("case", ["fits", "crosses", "zeros", "underflow"])
@pytest.mark.parametrize("qmin,qmax", [(-8, 7), (0, 15)])
@pytest.mark.parametrize("workers", [1, 3])
def test_clip_grids_in_slices_decide_float16_over_every_group(case, qmin, qmax, workers, monkeypatch):
    """Symmetric float16 scales of many groups are taken a slice of groups at a time, each
    ratio's storage type decided first from the smallest and largest range: the bits of
    scales_for_ranges over all groups, ratio by ratio, where some ratios' scales leave
    float16's normal range and others do not, with constant groups, and where a tiny range's
    scale underflows to 0; the slices shared among threads (chunked.share) or on one."""
    from onnxsurgery.quantization.clip_search import CLIP_RATIOS, _clip_grids
    from onnxsurgery.quantization.scales import GROUP_CHUNK, scales_for_ranges
    monkeypatch.setattr(chunked, "_workers", lambda: workers)
    monkeypatch.setattr(chunked, "_POOL", None)
    rng = np.random.default_rng(11)
    n = 2 * GROUP_CHUNK + 123
    hi = (np.abs(rng.standard_normal(n)) * 0.05 + 1e-3).astype(np.float32)
    lo = -hi * rng.random(n).astype(np.float32)
    if case == "crosses":  # scale 2^-14 at ratio 0.85: float16 for the larger ratios only
        hi[7] = np.float32(2.0 ** -14 * (qmax - (0 if qmin < 0 else 8)) / 0.85)
        lo[7] = -hi[7] / 2
    if case == "zeros":
        lo[:100], hi[:100] = 0, 0
    if case == "underflow":
        lo[5], hi[5] = 0, np.float32(1e-45)
    scales, zeros = _clip_grids(lo, hi, qmin, qmax, True, True)
    kinds = set()
    for g, ratio in enumerate(CLIP_RATIOS):
        scale, zero = scales_for_ranges(lo * ratio, hi * ratio, qmin, qmax, True, True)
        kinds.add(scale.dtype)
        assert scales[g].tobytes() == scale.astype(np.float32).tobytes()
        assert zeros[g].tobytes() == zero.astype(np.float32).tobytes()
    assert len(kinds) == (2 if case == "crosses" else 1)


@pytest.mark.parametrize("members", [8, 16, 32, 64, 128])
def test_pairwise_rows_sum_as_numpy_sums_a_contiguous_run(members):
    """clip_rows.pairwise_rows adds along whole rows in the order numpy's float32 sum over a
    contiguous last axis takes (its pairwise sum): the same bits, over values of every size."""
    from onnxsurgery.quantization.clip_rows import pairwise_rows
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((3, 500, members)) * 10.0 ** rng.integers(-9, 9, (3, 500, members))).astype(np.float32)
    x = np.square(x)
    want = x.sum(axis=-1)
    got = pairwise_rows(np.ascontiguousarray(x.transpose(0, 2, 1)))
    assert got.tobytes() == want.tobytes()
    assert not np.array_equal(got, x.astype(np.float64).sum(axis=-1).astype(np.float32))  # the order mattered


@pytest.mark.parametrize("shape,block_size", [((96, 256), 32), ((40, 3, 128), 16), ((64, 128), 128)])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_clip_search_in_rows_picks_as_along_the_members(shape, block_size, symmetric, weighted, monkeypatch):
    """Blocks along the last axis are searched laid out along the groups (clip_rows.py): the
    picks of the search over the members as they lie, with constant groups (every ratio ties:
    float64 sums) and huge values (squares past float32's range) among them."""
    from onnxsurgery.quantization import clip_rows, rounding
    monkeypatch.setattr(clip_search, "CLIP_CHUNK_ELEMENTS", 9000)
    rng = np.random.default_rng(13)
    x = (rng.standard_normal(shape) * rng.standard_t(3, shape)).astype(np.float32)
    x[:3] = 0
    x[5] *= np.float32(1e30)
    axis = len(shape) - 1
    importance = rng.uniform(0.1, 3, shape[axis]).astype(np.float32) if weighted else None
    lo, hi = rounding._ranges(x, "block", axis, block_size)
    with np.errstate(over="ignore", invalid="ignore"):
        got = clip_search._clip_ranges(x, lo, hi, -8, 7, symmetric, False, "block", axis, block_size, importance)
        monkeypatch.setattr(clip_rows, "fits", lambda members: False)
        want = clip_search._clip_ranges(x, lo, hi, -8, 7, symmetric, False, "block", axis, block_size, importance)
    assert got[2].tobytes() == want[2].tobytes()
    assert (got[2] > 0).any()  # the search clipped somewhere


@pytest.mark.parametrize("shape,axis", [((40, 64, 3, 3), 1), ((24, 96, 1, 1), 1), ((6, 64, 5, 7), 1), ((64, 8, 3), 0)])
def test_block_ranges_with_members_in_the_middle_match_numpy(shape, axis):
    """Blocks followed by a short run (a Conv weight's kernel) are reduced moved to the front:
    numpy's own min and max over the members, NaN and signed zeros among them."""
    from onnxsurgery.quantization import rounding
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x[0, 0] = -0.0
    x[1, 1] = np.nan
    lo, hi = rounding._ranges(x, "block", axis, 32)
    blocks = x.reshape(*shape[:axis], shape[axis] // 32, 32, *shape[axis + 1:])
    assert lo.tobytes() == blocks.min(axis=axis + 1).tobytes()
    assert hi.tobytes() == blocks.max(axis=axis + 1).tobytes()
    assert np.isnan(lo).any() and np.isnan(hi).any()


@pytest.mark.parametrize("shape", [(48, 64, 3, 3), (32, 96, 1, 1), (20, 64, 2, 5)])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_clip_search_with_members_in_the_middle_picks_as_they_lie(shape, symmetric, weighted, monkeypatch):
    """Conv weights blocked along their input channels are searched with the members moved last
    (the rows' pass): the picks of the search over the members where they lie, constant blocks
    (every ratio ties) and huge values among them."""
    monkeypatch.setattr(clip_search, "CLIP_CHUNK_ELEMENTS", 9000)
    rng = np.random.default_rng(17)
    x = (rng.standard_normal(shape) * rng.standard_t(3, shape)).astype(np.float32)
    x[:2] = 0
    x[4] *= np.float32(1e30)
    importance = rng.uniform(0.1, 3, (1, shape[1], *shape[2:])).astype(np.float32) if weighted else None
    from onnxsurgery.quantization import rounding
    lo, hi = rounding._ranges(x, "block", 1, 32)
    qmin, qmax = (-8, 7) if symmetric else (0, 15)
    with np.errstate(over="ignore", invalid="ignore"):
        got = clip_search._clip_ranges(x, lo, hi, qmin, qmax, symmetric, False, "block", 1, 32, importance)
        monkeypatch.setattr(clip_search, "MEMBERS_LAST", False)
        want = clip_search._clip_ranges(x, lo, hi, qmin, qmax, symmetric, False, "block", 1, 32, importance)
    assert got[2].tobytes() == want[2].tobytes()
    assert (got[2] > 0).any()  # the search clipped somewhere


@pytest.mark.parametrize("symmetric,half_scales", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize("extreme", [False, True])
def test_a_table_with_few_known_rows_searched_whole_gives_the_rest_search(symmetric, half_scales, extreme,
                                                                          monkeypatch):
    """clip_search._clip_rest on a table (channels along axis 0) with at most 1/WHOLE_FROM of its
    rows known: every row searched in place, the known picks put back, bit for bit what the
    search over the rows left copied out gives; also where a known row alone holds the largest
    range, so that float16 scales fit the rows left but not every row (`_same_grids`)."""
    monkeypatch.setattr(clip_search, "CLIP_CHUNK_ELEMENTS", 7000)
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((640, 64)) * rng.standard_t(3, (640, 64))).astype(np.float32)
    known_rows = np.arange(3, 640, 160)  # 4 of 640 rows
    if extreme:
        x[known_rows[1], 5] = 1e6  # its scale is past float16: every row's are float32, the rows left's not
    lo, hi = rounding._ranges(x, "block", 1, 32)
    picks = np.asarray([[i % 7, (i + 3) % 7] for i in range(len(known_rows))], np.uint8)  # any picks: put back
    known = (0, known_rows, picks)
    args = (-8, 7, symmetric, half_scales, "block", 1, 32, None, known)
    got = clip_search._clip_rest(x, lo, hi, *args)
    monkeypatch.setattr(clip_search, "WHOLE_FROM", 10 ** 9)  # the rows left copied out and searched
    want = clip_search._clip_rest(x, lo, hi, *args)
    for g, w in zip(got, want):
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
    assert (got[2][known_rows] == picks).all() and (got[2] > 0).any()


@pytest.mark.parametrize("size,ordered", [(1.0, True), (3e19, False)])
def test_grid_errors_add_in_order_below_float32s_end_and_pairwise_near_it(size, ordered):
    """clip_rows.grid_errors' float32 sums: the members added in order, but numpy's pairwise
    order (pairwise_rows) where a sum reaches ORDER_FREE, so that a square past float32's range
    overflows as the whole-array code's does (best_clip then sums in float64 throughout)."""
    from onnxsurgery.quantization import clip_rows
    rng = np.random.default_rng(21)
    v = (rng.standard_normal((50, 32)) * size).astype(np.float32)
    s = np.abs(v).max(axis=-1, keepdims=True)[None] / np.float32(7)
    s = s * np.asarray([1, 0.9, 0.8], np.float32)[:, None, None]
    with np.errstate(over="ignore", invalid="ignore"):
        sums, q = clip_rows.grid_errors(v, s, None, -8, 7, None, np.empty(3 * v.size, np.float32))
        in_order, pairwise = np.add.reduce(q, axis=1), clip_rows.pairwise_rows(q)
    assert sums.tobytes() == (in_order if ordered else pairwise).tobytes()
    assert ordered == bool(np.isfinite(in_order).all() and in_order.max() < clip_rows.ORDER_FREE)


def test_first_least_is_the_first_smallest_and_no_nan():
    """clip_search._first_least: the earliest grid of the smallest error, a NaN never picked
    after a number (argmin's where there is no NaN; the loop where there is)."""
    err = np.array([[3.0, 1.0, np.nan, 2.0, 5.0], [1.0, 1.0, 0.5, np.nan, 5.0], [1.0, 0.5, 0.1, 1.0, 5.0]])
    assert clip_search._first_least(err).tolist() == [1, 2, 0, 2, 0]
    finite = np.nan_to_num(err, nan=9.0)
    assert clip_search._first_least(finite).tolist() == finite.argmin(axis=0).tolist() == [1, 2, 2, 2, 0]
