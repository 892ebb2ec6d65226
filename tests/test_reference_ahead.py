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
    from onnxsurgery.running import runs

    real, made = runs.open_session, []

    def recorded(model, **options):
        made.append((str(model), threading.current_thread() is threading.main_thread()))
        return real(model, **options)

    monkeypatch.setattr(runs, "open_session", recorded)
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
    from onnxsurgery.running import runs

    _model(tmp_path / "in.onnx")
    real = runs.open_session

    def failing(model, **options):
        if str(model).endswith("in.onnx"):
            raise VerificationError("the original model does not run on generated inputs (made by hand)")
        return real(model, **options)

    monkeypatch.setattr(runs, "open_session", failing)
    with pytest.raises(VerificationError, match="made by hand"):
        onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx")
    assert not (tmp_path / "q.onnx").exists()
    assert not _ahead_alive()  # the thread is gone before quant_file returns


def test_nothing_runs_ahead_where_nothing_is_compared(tmp_path, monkeypatch):
    """--no-verify, and a model with nothing to quantize (a copy, loaded, not run)."""
    import onnxsurgery

    made = _recording_sessions(monkeypatch)
    _model(tmp_path / "in.onnx")
    onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", verify=False)
    onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q2.onnx", exclude=("*",))
    assert made == [] and not _ahead_alive()


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
    from onnxsurgery.running.reference_runs import run_reference

    _model(tmp_path / "in.onnx")
    stop = ort.RunOptions()
    stop.terminate = True
    with pytest.raises(VerificationError):
        run_reference(tmp_path / "in.onnx", None, None, 0, False, beside=stop)
    assert run_reference(tmp_path / "in.onnx", None, None, 0, False, beside=ort.RunOptions())[2]


def test_cancel_asks_only_while_the_work_runs():
    from onnxsurgery.running.ahead import Pending

    asked = []
    done = Pending(lambda: 1, cancel=lambda: asked.append(1))
    done.wait()
    done.cancel()
    assert asked == [] and done.result() == 1


def _held_or_done(pending, seconds: float = 60.0) -> None:
    """Until the work waits at its gate, or has ended (it never reached one)."""
    import time

    end = time.monotonic() + seconds
    while not pending.gate.reached.is_set() and pending._thread.is_alive() and time.monotonic() < end:
        time.sleep(0.01)


def test_only_the_first_run_goes_ahead_until_the_model_is_quantized(tmp_path, monkeypatch):
    """The batch-2 sample holds twice what the first does: beside int4's clip search it took
    eeg_spindles over its memory bound. It waits until the caller lets it go on, or asks."""
    from onnxsurgery.running import verify

    _model(tmp_path / "in.onnx")
    batches = builders.batches_run(monkeypatch)
    runs: dict = {}
    pending = verify.reference_ahead(tmp_path / "in.onnx", runs)
    _held_or_done(pending)
    assert batches == [1] and pending._thread.is_alive()  # batch 2 waits
    pending.go_on()
    names, samples, expected, merge, wider = pending.result()
    assert wider == 1  # where the batch-2 sample lies
    assert batches == [1, 2] and [s["x"].shape[0] for s in samples] == [1, 2]
    from onnxsurgery.running.reference_runs import run_reference

    assert run_reference(tmp_path / "in.onnx", None, None, 0, False)[2][1][0].shape == expected[1][0].shape


def test_asking_for_the_result_or_cancelling_opens_the_gate(tmp_path, monkeypatch):
    """An opset upgrade's check asks for the reference's runs before anything is quantized, and a
    failed run cancels them: neither waits for a gate nobody opens."""
    from onnxsurgery.running import verify

    _model(tmp_path / "in.onnx")
    batches = builders.batches_run(monkeypatch)
    pending = verify.reference_ahead(tmp_path / "in.onnx", {})
    _held_or_done(pending)
    assert len(pending.result()[1]) == 2 and batches == [1, 2]
    stopped = verify.reference_ahead(tmp_path / "in.onnx", {})
    _held_or_done(stopped)
    stopped.cancel()  # the run held at the gate is refused (terminate), not run
    assert not stopped._thread.is_alive()
    assert len(stopped.result()[1]) == 1  # batch 2 refused, as a model that takes batch 1 only


def test_quant_lets_the_held_runs_go_on_once_quantized(tmp_path, monkeypatch):
    """quant's verification gets all of the reference's runs, the batch-2 sample's after
    quantizing, with an opset upgrade (whose check may ask first) and without."""
    import onnxsurgery

    batches = builders.batches_run(monkeypatch)
    # each result changes a reader of activations (readers.py), so that the batch-2 sample is wanted:
    # 17: MatMulNBits for the MatMul; 11: int8's upgrade to 13 rewrites Softmax's axis (1 -> -1)
    _model(tmp_path / "in17.onnx", opset=17)
    report = onnxsurgery.quant_file(tmp_path / "in17.onnx", tmp_path / "q17.onnx", dtype="int4", lowering="matmulnbits")
    assert report.verification["samples"] == 2 and not _ahead_alive()
    onnx.save(builders.model([helper.make_node("MatMul", ["x", "W"], ["h"]),
                              helper.make_node("Softmax", ["h"], ["y"], axis=1)],
                             [builders.vi("x", shape=["batch", 64])], [builders.vi("y", shape=["batch", 64])],
                             [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W")], opset=11),
              str(tmp_path / "in11.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "in11.onnx", tmp_path / "q11.onnx")
    assert report.verification["samples"] == 2 and not _ahead_alive()
    assert batches.count(2) >= 4  # each model's and each result's batch-2 sample



def test_a_small_models_runs_all_go_ahead_at_once(tmp_path, monkeypatch):
    """A model under AHEAD_ALL_BYTES has its gate opened as its reference's runs start (its
    quantizer leaves room for the batch-2 sample); a larger one's stays closed until quantized."""
    from onnxsurgery.api import quantizing
    from onnxsurgery.pipeline import open_workspace
    from onnxsurgery.run_options import QuantRun

    _model(tmp_path / "in.onnx")
    run = QuantRun.given(None, {})
    opened = []
    for limit in (quantizing.AHEAD_ALL_BYTES, 0):
        monkeypatch.setattr(quantizing, "AHEAD_ALL_BYTES", limit)
        ws = open_workspace(tmp_path / "in.onnx")
        pending = quantizing._reference_ahead(tmp_path / "in.onnx", run, quantizing.prepare(tmp_path / "in.onnx", run),
                                              ws, {})
        opened.append(pending.gate._open.is_set())
        pending.cancel()
        ws.close()
    assert opened == [True, False]
    assert not _ahead_alive()
