"""The thirty-seventh round's (exports) zoo modules, on what they compute without their packages:
Resemblyzer's mel front end and its speaker decision; areaFluForecast's graph, features and decision
(torch, which the dev extra leaves out, only where fetch.py exports: it checks each file there)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zoo import resemblyzer  # noqa: E402
from zoo.speech import slaney_mel  # noqa: E402


def test_mel_frames_are_centered_and_a_tone_lands_in_its_band():
    """librosa's centered frames: 1 + len // 160 of them; a 1 kHz tone's power in the band whose
    Slaney filter peaks nearest 1 kHz, and power (not log): it scales with the amplitude squared."""
    t = np.arange(16000) / 16000
    tone = 0.1 * np.sin(2 * np.pi * 1000 * t)
    mel = resemblyzer.mel_spectrogram(tone)
    assert mel.shape == (1 + 16000 // 160, 40) and mel.dtype == np.float32
    band = int(np.argmax(slaney_mel(40, 400)[:, round(1000 / 40)]))
    assert (mel[5:-5].argmax(1) == band).all()
    assert np.allclose(resemblyzer.mel_spectrogram(2 * tone)[5:-5], 4 * mel[5:-5], rtol=1e-4)


def test_partial_is_160_frames_and_silence_cut():
    """A short utterance is zero-padded to one 1.6 s partial; leading silence is cut, so a delayed
    copy gives the same partial."""
    rng = np.random.default_rng(0)
    voice = (0.05 * rng.standard_normal(8000)).astype(np.float32)
    a = resemblyzer._partial(voice)
    b = resemblyzer._partial(np.concatenate([np.zeros(4000, np.float32), voice]))
    assert a.shape == (resemblyzer.FRAMES, 40)
    assert np.allclose(a, b, rtol=1e-5, atol=1e-9)
    assert a[60:].max() < 1e-6 * a[:40].max()  # past the voice: padding


def test_nearest_speaker_is_the_nearest_other_by_cosine():
    e = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0.8, 0.2]], np.float32)
    decided, sparse = resemblyzer.nearest_speaker({"embeds": e * [[1], [3], [1], [2]]}, None)
    assert not sparse and decided.tolist() == [1, 0, 3, 2]


def test_tune_and_report_voices_are_disjoint_and_every_sentence_differs_in_a_sample():
    assert not {v for v, _ in resemblyzer.VOICES[0]} & {v for v, _ in resemblyzer.VOICES[1000]}
    n = len(resemblyzer.SENTENCES)
    for i in range(4):
        assert len({(i + 2 * v + s) % n for v in range(4) for s in range(2)}) == 8


def test_flu_graph_has_borders_hops_and_strong_correlations_only():
    """Borders weigh 1, two hops 0.25 and three 0.125 (each pair walked from both ends: twice), an
    anchor is no shortcut, and a correlation above 0.85 adds r."""
    from zoo.flu_samples import graph_weights

    names = ["a", "b", "c", "d", "X"]
    t = np.arange(40, dtype=float)
    rates = np.stack([np.sin(t), np.sin(t) + 0.01 * np.cos(3 * t), np.cos(t), -np.sin(t)], 1)
    rates[3, 0] = np.nan  # pairwise complete rows, as pandas' corr
    W = graph_weights(names, 4, ["X"], [("a", "b"), ("b", "c"), ("c", "d"), ("a", "X"), ("X", "d")], rates)
    r_ab = np.corrcoef(np.delete(rates[:, 0], 3), np.delete(rates[:, 1], 3))[0, 1]
    assert np.isclose(W[0, 1], 1 + r_ab) and W[0, 1] == W[1, 0]
    assert np.isclose(W[0, 2], 2 * 0.25) and np.isclose(W[0, 3], 2 * 0.125)  # a-d: 3 hops, not via X
    assert W[0, 4] == 1 and W[1, 4] == 0 and W[2, 3] == 1


def test_flu_impute_carries_four_weeks_then_the_expanding_median():
    from zoo.flu_gnn import _impute

    rates = np.array([[1.0], [3.0], [2.0]] + [[np.nan]] * 6)
    filled = _impute(rates)[:, 0]
    assert filled[3:7].tolist() == [2.0] * 4 and filled[7:].tolist() == [2.0, 2.0]
    assert _impute(np.array([[np.nan], [np.nan], [5.0], [np.nan]]))[:, 0].tolist() == [0.0, 0.0, 5.0, 5.0]


def test_flu_climatology_recovers_a_seasonal_curve():
    import datetime as dt

    from zoo.flu_samples import climatology

    weeks = [dt.date(2018, 1, 7) + dt.timedelta(weeks=i) for i in range(200)]
    angle = 2 * np.pi * np.array([w.timetuple().tm_yday for w in weeks]) / 365.2425
    rates = np.expm1(2 + np.cos(angle))[:, None]
    level = climatology(weeks, rates, 150)
    assert np.allclose(level, rates, rtol=1e-6)  # past the fitted rows too


def test_flu_direction_is_forecast_above_this_weeks_level():
    from zoo.flu_gnn import flu_direction

    forecast = np.array([[1.0, 0.5], [0.0, -1.0]], np.float32)
    decided, sparse = flu_direction({"forecast": forecast}, {"anchor": np.array([0.7, -0.5], np.float32)})
    assert not sparse and decided.tolist() == [1, 0, 1, 0]
