"""Verification's onnxruntime sessions, the original's and the result's, sleep their idle threads
between operators (running/runs.py): spinning took CPU that one or two runs never paid back,
and on a shared machine the core that the other thread needed."""

from __future__ import annotations

import onnx
from onnx import helper

import builders


def _model(path) -> None:
    onnx.save(builders.model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                             [builders.vi("x", shape=["batch", 64])], [builders.vi("y", shape=["batch", 64])],
                             [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W")], opset=17),
              str(path))


def test_every_verification_session_sleeps_its_idle_threads(tmp_path, monkeypatch):
    import onnxsurgery
    from onnxsurgery.running import runs
    from onnxsurgery.running.sessions import session_settings

    real, asked = runs.session, []

    def recorded(model, **options):
        asked.append((str(model), options.get("beside", False)))
        return real(model, **options)

    monkeypatch.setattr(runs, "session", recorded)
    _model(tmp_path / "in.onnx")
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx")
    assert report.verification["rel_l2_error"] > 0  # both sides ran
    assert {m.rsplit("/", 1)[-1] for m, _ in asked} >= {"in.onnx"} and len(asked) >= 2
    assert all(beside for _, beside in asked), asked
    opts, _ = session_settings(beside=True)
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
