"""Twenty-fifth round (exports): Fracast-0's forecaster (shared dilated blocks, its periodogram's
rfft written as a radix-2 FFT in real ops for the TorchScript exporter) and UKAEA's TGLF surrogate
(deep ensembles as batched MatMuls, opset 11), and the zoo's own code for their inputs. The exports
themselves need torch, which the dev extra leaves out: each checks its file against the package's own
computation when zoo/fetch.py writes it (fracast: its torch module, torch.fft.rfft and all; tglf: the
reference outputs the wheel ships)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import fracast, tglf  # noqa: E402
from zoo.models import BY_NAME, MODELS, SKIPPED  # noqa: E402


def test_round25_models_are_new():
    names = [m.name for m in MODELS]
    assert len(names) == len(set(names))
    for name, package, module in (("fracast_forecaster", "fracast", fracast),
                                  ("tglf_multimachine", "tglfnn-ukaea", tglf)):
        row = BY_NAME[name]
        assert row.package.startswith(package + "==") and row.source == "torch"
        assert callable(getattr(module, row.inputs)) and callable(module.export) and row.export == module.__name__[4:]
    assert not any(k.startswith("fracast") for k in SKIPPED)
    assert not any("multimachine" in k for k in SKIPPED)  # its step model is skipped, not this one


def test_contexts_are_normalized_as_the_package_does():
    feeds = fracast.forecast_contexts(None, 0, 2)
    assert len(feeds) == 2
    for feed in feeds:
        assert feed["context"].shape == feed["observed"].shape == (4, fracast.W)
        seen = feed["observed"] > 0
        assert np.all(feed["context"][~seen] == 0)
        for row, mask in zip(feed["context"], seen):
            assert row[mask].min() == 0 and abs(row[mask].max() - 1) < 1e-6
    # the sales series is recorded only lately: its context is masked before that
    kinds = [fracast.KINDS[(4 * i + j) % len(fracast.KINDS)] for i in range(2) for j in range(4)]
    sales = kinds.index("sales")
    observed = feeds[sales // 4]["observed"][sales % 4]
    assert 300 <= observed.sum() <= 900 and observed[-1] == 1 and observed[0] == 0
    other = fracast.forecast_contexts(None, 1000, 1)[0]["context"]
    assert not np.array_equal(other, feeds[0]["context"])  # the report set is its own draw


def test_forecast_levels_are_thirds_of_the_context_range():
    q = np.zeros((1, 3, 9), np.float32)
    q[0, :, 4] = [0.1, 0.5, 0.95]
    q[0, :, 0] = 5.0  # other quantiles do not decide
    levels, sparse = fracast.forecast_levels({"quantiles": q}, None)
    assert levels.tolist() == [0, 1, 2] and sparse is False
    q[0, :, 4] = [-0.2, 1.4, 0.34]  # forecasts outside the context's range: clipped to its ends
    assert fracast.forecast_levels({"quantiles": q}, None)[0].tolist() == [0, 2, 1]


def test_transport_channels_compare_heat_and_sign_the_particle_flux():
    out = {"efe_gb": np.array([[5.0, 1], [1.0, 1]]), "efi_gb": np.array([[2.0, 1], [3.0, 1]]),
           "pfi_gb": np.array([[-0.5, 1], [0.7, 1]])}
    decision, sparse = tglf.transport_channels(out, None)
    assert decision.tolist() == [1, 0, 0, 1] and sparse is False


def test_reference_rows_split_tune_and_report(monkeypatch):
    rows = np.arange(64 * 13, dtype=np.float32).reshape(64, 13)
    monkeypatch.setattr(tglf, "_reference", lambda: {"inputs": rows})
    tune, report = tglf.tglf_reference_rows(None, 0, 4), tglf.tglf_reference_rows(None, 1000, 4)
    assert [f["input"].shape for f in tune + report] == [(8, 13)] * 8
    assert np.array_equal(np.concatenate([f["input"] for f in tune]), rows[:32])
    assert np.array_equal(np.concatenate([f["input"] for f in report]), rows[32:])
