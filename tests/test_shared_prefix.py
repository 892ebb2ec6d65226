"""The second candidate's differing part run alone computes what the whole file does (shared_prefix.py)."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from onnxsurgery.api.shared_prefix import Suffix


def _chain(path, last: np.ndarray, layers: int = 6) -> None:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = last if i == layers - 1 else rng.standard_normal((8, 8)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [2, 8])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))


def _run(model, feeds):
    sess = ort.InferenceSession(model if isinstance(model, str) else model.SerializeToString())
    return sess.run(None, feeds)


def test_the_suffix_computes_the_second_file(tmp_path):
    rng = np.random.default_rng(1)
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _chain(a, rng.standard_normal((8, 8)).astype(np.float32))
    _chain(b, rng.standard_normal((8, 8)).astype(np.float32))
    suffix = Suffix.of(a, b)
    assert suffix is not None and suffix.cut == ["r4"] and suffix.outputs == ["r5"]
    assert len(suffix.model.graph.node) == 2  # the last MatMul and its Relu
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    first = _run(suffix.asking(["r4"]), feeds)
    handed = {"r4": first[1]}
    (got,) = _run(suffix.typed(handed), handed)
    np.testing.assert_array_equal(got, _run(str(b), feeds)[0])
    np.testing.assert_array_equal(first[0], _run(str(a), feeds)[0])  # the extra output leaves its outputs


def test_no_cut_where_the_first_weight_differs(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _chain(a, np.ones((8, 8), np.float32), layers=1)
    _chain(b, np.zeros((8, 8), np.float32), layers=1)
    assert Suffix.of(a, b) is None  # the whole graph differs: nothing shared


def test_pieced_outputs_are_confirmed_by_a_whole_run(tmp_path):
    """A kept candidate's outputs pieced from a cut run reach verification only where its file run
    whole on the first sample gives them bit for bit (measured_or_free.Built.confirm)."""
    from onnxsurgery.api.measured_or_free import Built

    path = tmp_path / "b.onnx"
    _chain(path, np.eye(8, dtype=np.float32))
    feed = {"x": np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)}
    (right,) = _run(str(path), feed)
    same = Built("", [[right]], path, pieced=(["r5"], feed))
    same.confirm()
    assert same.outputs is not None
    off = Built("", [[np.nextafter(right, np.float32(np.inf))]], path, pieced=(["r5"], feed))  # one ulp apart
    off.confirm()
    assert off.outputs is None


def _runs_of(tmp_path, scale_b: float):
    """shared_runs on two chains whose last weights differ from a reference chain's by noise, the
    second's `scale_b` times the first's; each candidate's Built, outputs and errors."""
    from onnxsurgery.api.built import Built
    from onnxsurgery.api.shared_runs import shared_runs

    rng = np.random.default_rng(3)
    last, noise = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    paths = []
    for name, w in (("ref", last), ("a", last + 0.1 * noise), ("b", last + 0.1 * scale_b * noise)):
        (tmp_path / name).mkdir()
        _chain(tmp_path / name / "m.onnx", w)
        paths.append(tmp_path / name / "m.onnx")
    feeds = [{"x": np.abs(rng.standard_normal((2, 8))).astype(np.float32)} for _ in range(4)]
    expected = [_run(str(paths[0]), f) for f in feeds]

    def scored(outputs, errors):
        del errors[len(outputs):]
        errors += [float(np.linalg.norm(o[0] - e[0]) / np.linalg.norm(e[0]))
                   for o, e in zip(outputs[len(errors):], expected[len(errors):])]
        return errors

    def judged(path, made, outputs, unfolded, errors=None):
        made[-1].outputs = outputs
        return scored(outputs, [] if errors is None else errors)

    made = ([Built("", None, paths[1])], [Built("", None, paths[2])])
    found = shared_runs(paths[1:], ["r5"], feeds, (judged, scored), made, 1 << 20)
    return made, found, feeds, paths


def test_shared_runs_stop_the_measured_file_where_the_data_free_one_is_close_first(tmp_path):
    made, found, feeds, paths = _runs_of(tmp_path, 0.95)  # 5% below on each: close, not clear on the first
    assert len(found[0]) == 2 and len(found[1]) == 4  # the measured file's 3rd and 4th runs not made
    assert len(made[0][0].outputs) == 2 and made[1][0].pieced is not None  # confirmed if kept
    for got, feed in zip(made[1][0].outputs, feeds):  # pieced (first two) and whole: the file's outputs
        np.testing.assert_array_equal(got[0], _run(str(paths[2]), feed)[0])


def test_shared_runs_stop_the_measured_file_after_a_clear_first_sample(tmp_path):
    made, found, feeds, paths = _runs_of(tmp_path, 0.5)  # half the measured file's error: clear on the first
    assert len(found[0]) == 1 and len(found[1]) == 4  # the measured file's 2nd to 4th runs not made
    assert len(made[0][0].outputs) == 1 and made[1][0].pieced is not None
    for got, feed in zip(made[1][0].outputs, feeds):  # pieced (the first) and whole: the file's outputs
        np.testing.assert_array_equal(got[0], _run(str(paths[2]), feed)[0])


def test_shared_runs_as_before_where_the_measured_file_leads(tmp_path):
    made, found, feeds, paths = _runs_of(tmp_path, 3.0)
    assert len(found[0]) == 4 and 2 <= len(found[1]) < 4  # the suffix stopped once the measured file is kept
    for got, feed in zip(made[0][0].outputs, feeds):
        np.testing.assert_array_equal(got[0], _run(str(paths[1]), feed)[0])


def test_the_data_free_files_whole_runs_confirm_its_pieced_outputs_in_one_session(tmp_path, monkeypatch):
    """Where the first samples keep the data-free file, its remaining samples run whole in a session
    that runs the first sample too: its pieced outputs are confirmed there, not by a session of its
    own afterwards (issue 58, inputs17)."""
    import onnxsurgery.api.built as built_module
    import onnxsurgery.api.shared_runs as shared_runs_module

    asked, real = [], built_module.candidate_runs

    def counted(path, names, feeds, *a, **k):
        asked.append([id(f) for f in feeds])
        return real(path, names, feeds, *a, **k)

    monkeypatch.setattr(shared_runs_module, "candidate_runs", counted)
    monkeypatch.setattr(built_module, "candidate_runs", counted)
    made, found, feeds, paths = _runs_of(tmp_path, 0.95)
    assert asked == [[id(feeds[0]), id(feeds[2]), id(feeds[3])]]  # one session: the first again, then the rest
    kept = made[1][0]
    assert kept.confirmed and kept.outputs is not None
    kept.confirm()  # measured_or_free's call after the choice: nothing run again
    assert len(asked) == 1 and kept.outputs is not None
    for got, feed in zip(kept.outputs, feeds):
        np.testing.assert_array_equal(got[0], _run(str(paths[2]), feed)[0])
