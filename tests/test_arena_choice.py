"""A comparison runs with onnxruntime's memory arena only where the samples' activations are all
below glibc's mmap threshold (32 MiB) and some reach 1 MiB (running/arena.py): decided once from
shape inference with the first sample's shapes, or where those leave most values unsized, from
the first run's (onnxruntime's profile); both sessions alike, the arena shrunk after each run;
outputs are the same either way."""

from __future__ import annotations

import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.running import arena, runs
from onnxsurgery.running.verify import compare_models


def _model(path):
    """x [N, C] (dynamic) -> Relu -> Mul by a constant -> Add: activations of x's size."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "two"], ["m"]),
         helper.make_node("Add", ["m", "x"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c"])], [two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)
    return path


def _lazy(shape):  # the shape of a large sample without its memory: only its shape is read
    return np.broadcast_to(np.float32(1.0), shape)


def test_the_arena_where_activations_are_middling_only(tmp_path):
    path = _model(tmp_path / "m.onnx")
    assert arena.largest_activation(path, {"x": _lazy((1024, 1024))}) == 4 << 20
    assert arena.arena_pays(path, [{"x": _lazy((1024, 1024))}])
    assert not arena.arena_pays(path, [{"x": _lazy((4096, 4096))}])  # 64 MiB: glibc maps it afresh
    assert not arena.arena_pays(path, [{"x": _lazy((4, 4))}])  # tiny: nothing to fragment
    assert not arena.arena_pays(path, None) and not arena.arena_pays(path, [])


def test_unresolved_shapes_decide_nothing(tmp_path):
    """A value whose shape inference cannot give (here NonZero's count, data-dependent) may be
    the large one: with most values unresolved, no arena."""
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["t"]),
         helper.make_node("Cast", ["t"], ["y"], to=TensorProto.FLOAT)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    assert arena.largest_activation(path, {"x": _lazy((1024, 1024))}) is None
    assert not arena.arena_pays(path, [{"x": _lazy((1024, 1024))}])
    assert arena.arena_verdict(path, [{"x": _lazy((1024, 1024))}]).on is None  # the first run says


def _nonzero_model(path, dtype=TensorProto.FLOAT):
    """x [N, C] -> Relu -> Mul (x's size, resolved) and NonZero -> Transpose -> Cast (unresolved)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["nz"]),
         helper.make_node("Transpose", ["nz"], ["t"]), helper.make_node("Cast", ["t"], ["c"], to=dtype),
         helper.make_node("Neg", ["c"], ["n"]), helper.make_node("Abs", ["n"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"])],
        [helper.make_tensor_value_info("y", dtype, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_where_shapes_are_unresolved_the_first_run_decides(tmp_path, monkeypatch):
    """NonZero's count is data: the first run, profiled, gives the sizes that inference cannot."""
    path = _nonzero_model(tmp_path / "nz.onnx")
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the profile goes, and is removed from
    rng = np.random.default_rng(0)
    # about half of x positive: NonZero's [2, count] int64 8 MiB, the Cast's float 4 MiB
    feeds = {"x": rng.standard_normal((1024, 1024)).astype(np.float32)}
    verdict = arena.arena_verdict(path, [feeds])
    assert verdict.on is None
    sess = runs.open_session(path, arena=verdict)
    assert isinstance(sess, arena.ArenaSession) and sess.get_session_options().enable_profiling
    plain = runs.run(runs.open_session(path), ["y"], feeds)[0]
    assert runs.run(sess, ["y"], feeds)[0].tobytes() == plain.tobytes()
    assert verdict.on is True  # 8 MiB: in [1, 32) MiB
    assert not list(temp.iterdir())  # the profile read and removed
    assert runs.run(sess, ["y"], feeds)[0].tobytes() == plain.tobytes()  # later runs not profiled
    later = runs.open_session(path, arena=verdict)
    assert isinstance(later, arena.ArenaSession) and not later.get_session_options().enable_profiling
    # a first run whose largest output is tiny: the arena off for the sessions after it
    small = arena.Verdict(None)
    runs.run(runs.open_session(path, arena=small), ["y"], {"x": feeds["x"][:8, :8].copy()})
    assert small.on is False
    assert not isinstance(runs.open_session(path, arena=small), arena.ArenaSession)
    unrun = runs.open_session(path, arena=arena.Verdict(None))  # never run: its profile goes with it
    assert list(temp.iterdir())
    del unrun
    assert not list(temp.iterdir())


def test_a_large_value_among_those_resolved_decides_without_a_run(tmp_path):
    path = _nonzero_model(tmp_path / "nz.onnx")
    assert arena.arena_verdict(path, [{"x": _lazy((4096, 4096))}]).on is False  # Relu's 64 MiB


def test_a_profile_that_cannot_be_read_says_no_size(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("not json")
    assert arena.first_run_largest(str(bad)) is None
    assert arena.first_run_largest(str(tmp_path / "missing.json")) is None


def test_a_comparison_passes_the_choice_to_both_sessions_and_shrinks_each_run(tmp_path, monkeypatch):
    path = _model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((512, 1024)).astype(np.float32)} for _ in range(2)]
    opened, shrunk = [], []
    real_open, real_shrink = runs.open_session, arena.shrink_after

    def open_session(model, **options):
        opened.append(arena.wanted(options.get("arena")))
        return real_open(model, **options)

    def shrink_after(options):
        shrunk.append(True)
        real_shrink(options)

    monkeypatch.setattr(runs, "open_session", open_session)
    monkeypatch.setattr(arena, "shrink_after", shrink_after)
    copy = tmp_path / "copy.onnx"
    copy.write_bytes(path.read_bytes())
    with_arena = compare_models(path, copy, samples=samples)
    assert opened == [True, True] and len(shrunk) == 4  # two sessions, two runs each
    assert with_arena["exact"]
    opened.clear()
    small = [{"x": s["x"][:4, :4].copy()} for s in samples]
    compare_models(path, copy, samples=small)
    assert opened == [False, False]


def test_the_arena_computes_the_same_outputs(tmp_path):
    path = _model(tmp_path / "m.onnx")
    feeds = {"x": np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)}
    with_arena = runs.open_session(path, arena=True)
    without = runs.open_session(path)
    assert isinstance(with_arena, arena.ArenaSession) and not isinstance(without, arena.ArenaSession)
    assert with_arena.get_session_options().enable_cpu_mem_arena
    assert not without.get_session_options().enable_cpu_mem_arena
    a, b = runs.run(with_arena, ["y"], feeds)[0], runs.run(without, ["y"], feeds)[0]
    assert a.tobytes() == b.tobytes()


def test_quant_inputs_candidates_take_the_same_verdict(tmp_path, monkeypatch):
    """`quant --inputs`' candidates' runs (api/built.py) open their sessions with the arena where
    shapes decide it as a comparison's, one Verdict per file and arrays; the capture's probes too
    where what they return is small (tests/test_capture_arena.py)."""
    from onnxsurgery.api import built
    from onnxsurgery.quantization.calibration import Calibration

    path = _model(tmp_path / "m.onnx")
    samples = [{"x": np.random.default_rng(2).standard_normal((1024, 1024)).astype(np.float32)}]
    assert isinstance(Calibration(path, samples)._probe({}), arena.ArenaSession)  # 4 MiB values
    assert arena.arena_verdict(path, samples) is arena.arena_verdict(path, [dict(samples[0])])  # inferred once
    asked = []
    real = built.session

    def session(model, **options):
        asked.append(arena.wanted(options.get("arena")))
        return real(model, **options)

    monkeypatch.setattr(built, "session", session)
    outputs, unfolded = built.candidate_runs(path, ["y"], samples)
    assert asked == [True] and unfolded
    small = [{"x": samples[0]["x"][:4, :4].copy()}]
    built.candidate_runs(path, ["y"], small)
    assert asked == [True, False]
    unsized = _nonzero_model(tmp_path / "nz.onnx")  # undecided by shapes: no first run of a candidate's
    built.candidate_runs(unsized, ["y"], samples)
    assert asked == [True, False, False]
