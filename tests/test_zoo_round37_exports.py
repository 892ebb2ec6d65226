"""The thirty-seventh round's (exports) zoo modules, on what they compute without their packages:
Resemblyzer's mel front end and its speaker decision."""

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
