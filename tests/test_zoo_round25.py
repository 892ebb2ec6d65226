"""Twenty-fifth round (exports): Fracast-0's forecaster (shared dilated blocks, its periodogram's
rfft written as a radix-2 FFT in real ops for the TorchScript exporter) and UKAEA's TGLF surrogate
(deep ensembles as batched MatMuls, opset 11), and the zoo's own code for their inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

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


def test_the_radix2_fft_is_numpys_power_spectrum():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32)
    power = fracast._rfft_power(torch.from_numpy(x)).numpy()
    expected = np.abs(np.fft.rfft(x.astype(np.float64))) ** 2
    assert power.shape == (3, 129)
    assert np.abs(power - expected).max() <= 1e-4 * expected.max()


def test_the_periodogram_finds_a_daily_and_a_weekly_cycle():
    torch = pytest.importorskip("torch")
    t = np.arange(fracast.W)
    load = np.sin(2 * np.pi * t / 24) + 0.6 * np.sin(2 * np.pi * t / 168)
    noise = np.random.default_rng(1).standard_normal((1, fracast.W)) * 0.05
    periods, scores, n_valid = fracast.significant_periods(torch.tensor(load[None] + noise, dtype=torch.float32),
                                                           max_period=fracast.W // 2, top_k=4)
    found = set(periods[0].tolist())
    assert {24, 171} <= found or {24, 170} <= found or {24, 168} <= found  # 2048 / 12 bins: 170.7
    assert int(n_valid[0]) >= 2 and np.isneginf(scores[0, -1].item()) == (int(n_valid[0]) < 4)


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


def test_the_ensemble_module_is_the_mixture_of_its_members():
    """Two members, one hidden layer: normalize, MLP each, softplus variance; the mixture's mean and
    variance, denormalized (checked in numpy)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    w = {"input_mean": rng.standard_normal((1, 3)), "input_std": rng.uniform(0.5, 2, (1, 3)),
         "output_mean": np.array([4.0]), "output_std": np.array([3.0]), "variance_epsilon": np.array([1e-6]),
         "num_layers": np.array([2]), "output_labels": np.array(["efe_gb"]),
         "efe_gb/layer_0/weight": rng.standard_normal((2, 6, 3)).astype(np.float32),
         "efe_gb/layer_0/bias": rng.standard_normal((2, 6)).astype(np.float32),
         "efe_gb/layer_1/weight": rng.standard_normal((2, 2, 6)).astype(np.float32),
         "efe_gb/layer_1/bias": rng.standard_normal((2, 2)).astype(np.float32)}
    x = rng.standard_normal((4, 3)).astype(np.float32)
    with torch.no_grad():
        (got,) = tglf._module(w)(torch.from_numpy(x))
    h = (x - w["input_mean"][0]) / w["input_std"][0]
    h = np.maximum(np.einsum("bi,eoi->ebo", h, w["efe_gb/layer_0/weight"]) + w["efe_gb/layer_0/bias"][:, None], 0)
    h = np.einsum("ebi,eoi->ebo", h, w["efe_gb/layer_1/weight"]) + w["efe_gb/layer_1/bias"][:, None]
    mu, var = h[..., 0], np.log1p(np.exp(h[..., 1])) + 1e-6
    mean = mu.mean(0)
    variance = (var + mu ** 2).mean(0) - mean ** 2
    assert np.allclose(got.numpy()[:, 0], mean * 3 + 4, atol=1e-4)
    assert np.allclose(got.numpy()[:, 1], variance * 9, rtol=1e-3, atol=1e-4)
