"""quant runs the original model for its verification on another thread while it quantizes
(running/ahead.py, verify.reference_ahead): the same outputs, the same figures, its errors
raised where the comparison asks for them, and nothing started where nothing is compared."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import helper

import builders


def _model(path, opset: int = 17) -> None:
    onnx.save(builders.model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                             [builders.vi("x", shape=["batch", 64])], [builders.vi("y", shape=["batch", 64])],
                             [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W")], opset=opset),
              str(path))


def _ahead_alive() -> bool:
    return any(t.name == "onnxsurgery-ahead" for t in threading.enumerate())


def _recording_sessions(monkeypatch) -> list[tuple[str, bool]]:
    """(the thread's name, whether on the main thread) of each verification session made."""
    from onnxsurgery.running import verify

    real, made = verify._named_session, []

    def recorded(model, **options):
        made.append((str(model), threading.current_thread() is threading.main_thread()))
        return real(model, **options)

    monkeypatch.setattr(verify, "_named_session", recorded)
    return made


@pytest.mark.parametrize("given", [False, True])
def test_the_original_runs_beside_the_quantizer_and_computes_the_same(tmp_path, monkeypatch, given):
    import onnxsurgery
    from onnxsurgery.running.verify import compare_models

    _model(tmp_path / "in.onnx")
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((b, 64)).astype(np.float32)} for b in (1, 3)] if given else None
    made = _recording_sessions(monkeypatch)
    # symmetric: no choice measured on the samples (those runs would be the reference's, captured)
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", samples=samples,
                                    symmetric=True) if given else \
        onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx")
    reference = [on_main for model, on_main in made if model.endswith("in.onnx")]
    assert reference == [False]  # the original: once, on the other thread
    again = compare_models(tmp_path / "in.onnx", tmp_path / "q.onnx", samples=samples, fold_candidate=False)
    for key in ("rel_l2_error", "max_abs_error", "samples", "not_finite"):
        assert report.verification[key] == again[key]
    assert report.verification["rel_l2_error"] > 0  # it was quantized, and compared


def test_a_reference_that_fails_fails_the_comparison_and_writes_nothing(tmp_path, monkeypatch):
    import onnxsurgery
    from onnxsurgery.errors import VerificationError
    from onnxsurgery.running import verify

    _model(tmp_path / "in.onnx")

    def failing(*args, **kwargs):
        raise VerificationError("the original model does not run on generated inputs (made by hand)")

    monkeypatch.setattr(verify, "_reference_runs", failing)
    with pytest.raises(VerificationError, match="made by hand"):
        onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx")
    assert not (tmp_path / "q.onnx").exists()
    assert not _ahead_alive()  # the thread is gone before quant_file returns


def test_nothing_runs_ahead_where_nothing_is_compared(tmp_path, monkeypatch):
    """--no-verify, and a model with nothing to quantize (a copy, loaded, not run)."""
    import onnxsurgery
    from onnxsurgery.running import verify

    started = []
    monkeypatch.setattr(verify, "Pending", lambda compute: started.append(1))
    _model(tmp_path / "in.onnx")
    onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", verify=False)
    onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q2.onnx", exclude=("*",))
    assert started == []


def test_pending_hands_over_the_result_or_the_error():
    from onnxsurgery.running.ahead import Pending

    assert Pending(lambda: 42).result() == 42
    failed = Pending(lambda: 1 / 0)
    failed.wait()
    with pytest.raises(ZeroDivisionError):
        failed.result()


def test_a_run_that_fails_while_quantizing_stops_the_reference(tmp_path, monkeypatch):
    """The reference's runs are stopped (onnxruntime's RunOptions.terminate), not waited for: a
    Ctrl-C or an error during quantization of a large model exits at once."""
    import onnxsurgery
    from onnxsurgery.api import quantizing
    from onnxsurgery.running import verify

    started, real = [], verify.reference_ahead

    def recorded(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    def failing(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(quantizing, "reference_ahead", recorded)
    monkeypatch.setattr(quantizing, "at_required_opset", failing)
    _model(tmp_path / "in.onnx")
    with pytest.raises(KeyboardInterrupt):
        onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx")
    assert len(started) == 1 and not _ahead_alive()
    assert not (tmp_path / "q.onnx").exists()


def test_a_terminated_session_refuses_its_next_runs(tmp_path):
    import onnxruntime as ort

    from onnxsurgery.errors import VerificationError
    from onnxsurgery.running import verify

    _model(tmp_path / "in.onnx")
    stop = ort.RunOptions()
    stop.terminate = True
    with pytest.raises(VerificationError):
        verify._reference_runs(tmp_path / "in.onnx", None, None, 0, False, beside=stop)
    assert verify._reference_runs(tmp_path / "in.onnx", None, None, 0, False, beside=ort.RunOptions())[2]


def test_cancel_asks_only_while_the_work_runs():
    from onnxsurgery.running.ahead import Pending

    asked = []
    done = Pending(lambda: 1, cancel=lambda: asked.append(1))
    done.wait()
    done.cancel()
    assert asked == [] and done.result() == 1
