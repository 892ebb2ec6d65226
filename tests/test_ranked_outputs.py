"""Outputs ranked by a TopK are compared as sets of rows (running/ranked.py): an end-to-end
detector's top k rows swap where scores tie, which is no error (isbnx's YOLO26n int8 read 0.76
row by row on generated inputs, 0.099 as a set)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import builders
from onnxsurgery.running.ranked import matched, ranked_outputs, _greedy_pairs
from onnxsurgery.running.output_errors import compare_outputs
from onnxsurgery.running.verify import compare_models


def _detector(swap: bool) -> onnx.ModelProto:
    """x [1, 16] -> scores = x @ W [1, 32] -> TopK k=8 -> rows = table[indices] [8, 4] -> y.
    W's columns 0 and 1 are equal, so are their scores: TopK puts the lower index first. With
    `swap`, columns 0 and 1 of W and rows 0 and 1 of the table trade places: the same rows, in
    another order where the scores tie."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 32)).astype(np.float32)
    w[:, 0] += 5.0  # among the top 8 on x = ones
    w[:, 1] = w[:, 0]  # and tied with column 0
    table = rng.standard_normal((32, 4)).astype(np.float32)
    if swap:
        table[[0, 1]] = table[[1, 0]]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["s"]),
             helper.make_node("TopK", ["s", "k"], ["values", "indices"], axis=-1),
             helper.make_node("Squeeze", ["indices", "zero"], ["flat"]),
             helper.make_node("Gather", ["table", "flat"], ["y"], axis=0)]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([8], np.int64), "k"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(table, "table")]
    return builders.model(nodes, [builders.vi("x", shape=[1, 16])], [builders.vi("y", shape=[8, 4])], inits,
                          opset=17)


def test_a_topk_upstream_makes_an_output_ranked():
    assert ranked_outputs(_detector(False)) == {"y": 8}
    plain = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[1, 4])],
                           [builders.vi("y", shape=[1, 4])], [numpy_helper.from_array(builders.rand((4, 4), 1), "W")])
    assert ranked_outputs(plain) == {}


def test_rows_in_another_order_match():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((2, 8, 6)).astype(np.float32)
    cand = ref[:, rng.permutation(8)] + 1e-4
    assert np.allclose(matched(ref, cand, axis=1), ref, atol=1e-3)
    row_by_row = compare_outputs([ref], [cand], ["y"])["y"]
    as_a_set = compare_outputs([ref], [cand], ["y"], ranked={"y": 8})["y"]
    assert row_by_row["rel_l2_error"] > 0.5 and as_a_set["rel_l2_error"] < 1e-3 and as_a_set["ranked"] == 8
    # a row that changed still counts
    cand[0, 3] += 1.0
    assert compare_outputs([ref], [cand], ["y"], ranked={"y": 8})["y"]["rel_l2_error"] > 0.05


def test_two_models_whose_tied_rows_swap_compare_equal(tmp_path):
    onnx.save(_detector(False), str(tmp_path / "a.onnx"))
    onnx.save(_detector(True), str(tmp_path / "b.onnx"))
    samples = [{"x": np.ones((1, 16), np.float32)}]
    result = compare_models(tmp_path / "a.onnx", tmp_path / "b.onnx", samples=samples)
    assert not result["exact"]  # the rows did swap
    assert result["rel_l2_error"] == 0.0 and result["outputs"]["y"]["ranked"] == 8


def _walked(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """The greedy walk _greedy_pairs replaced: every pair in order of distance (stable), one at a time."""
    with np.errstate(invalid="ignore", over="ignore"):
        distance = (ref * ref).sum(1)[:, None] + (cand * cand).sum(1)[None, :] - 2 * ref @ cand.T
    distance = np.where(np.isnan(distance), np.inf, distance)
    k = ref.shape[0]
    pair, taken = np.full(k, -1), np.zeros(k, bool)
    for flat in np.argsort(distance, axis=None, kind="stable"):
        r, c = divmod(int(flat), k)
        if pair[r] < 0 and not taken[c]:
            pair[r], taken[c] = c, True
    return pair


def test_pairs_taken_in_rounds_are_the_greedy_walks():
    rng = np.random.default_rng(3)
    for k in (2, 3, 7, 40, 120):
        for trial in range(12):
            # few distinct values: many equal distances, where the order of ties decides
            ref = rng.integers(0, 3, (k, 4)).astype(np.float64)
            cand = rng.integers(0, 3, (k, 4)).astype(np.float64) if trial % 2 else rng.random((k, 4))
            if trial % 3 == 0:
                ref[rng.integers(0, k)] = np.nan
            if trial % 4 == 0:
                cand[rng.integers(0, k, 2)] = np.nan
            got = _greedy_pairs(ref, cand)
            assert sorted(got) == list(range(k))  # each candidate row once
            assert np.array_equal(got, _walked(ref, cand)), (k, trial)
