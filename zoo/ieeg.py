"""Inputs for brainmaze-eeg-models' seizure detector (modelA_paper.onnx: a spectrogram CNN and a
bidirectional LSTM exported by torch; Sladky et al. 2022): 300 s windows of synthetic intracranial
EEG at 250 Hz, featurized as its preprocess_input does (the window z-scored, scipy's spectrogram with
1 s segments every 0.5 s, bins 0-99 Hz, each bin z-scored over time; in numpy here): [1, 100, 599].

The signal: 1/f background with an alpha and a beta rhythm; interictal spikes (sharp transients
followed by a slow wave) at random times; one seizure of 40-110 s: a few seconds of low-voltage fast
activity (25-40 Hz), then a rhythmic discharge whose frequency falls from 7-9 Hz to 2-3 Hz and whose
amplitude grows, with the harmonics of spike-and-wave; and, in some windows, 50 Hz line noise or a
movement artifact (a large slow swing). Decision: each 0.5 s column's class (argmax of the 4:
the package's index 3 is seizure).
"""

from __future__ import annotations

import numpy as np

from zoo.signals import _pink
from zoo.sources import seeded

FS = 250
SECONDS = 300


def ieeg_window(rng: np.random.Generator) -> np.ndarray:
    n = FS * SECONDS
    t = np.arange(n) / FS
    x = 30 * _pink(rng, n)
    x += 6 * np.sin(2 * np.pi * rng.uniform(8, 12) * t) + 3 * np.sin(2 * np.pi * rng.uniform(16, 24) * t)
    for s in rng.uniform(0, SECONDS - 1, int(rng.integers(4, 15))):  # interictal spikes
        i = int(s * FS)
        k = np.arange(int(0.35 * FS))
        spike = 150 * np.exp(-((k - 8) / 4.0) ** 2) - 50 * np.exp(-((k - 45) / 18.0) ** 2)
        x[i:i + len(k)] += spike[: n - i]
    length = rng.uniform(40, 110)
    start = rng.uniform(20, SECONDS - length - 10)
    i0, fast = int(start * FS), int(rng.uniform(3, 8) * FS)
    tt = np.arange(fast) / FS
    x[i0:i0 + fast] += 15 * np.sin(2 * np.pi * rng.uniform(25, 40) * tt) * np.linspace(0.3, 1, fast)
    m = int(length * FS) - fast
    f = np.linspace(rng.uniform(7, 9), rng.uniform(2, 3), m)
    phase = 2 * np.pi * np.cumsum(f) / FS
    discharge = np.sin(phase) + 0.5 * np.sin(2 * phase) + 0.25 * np.sin(3 * phase)  # spike-and-wave
    x[i0 + fast:i0 + fast + m] += rng.uniform(100, 200) * np.linspace(0.4, 1, m) * discharge
    if rng.random() < 0.5:
        x += 20 * np.sin(2 * np.pi * 50 * t)
    if rng.random() < 0.5:
        a = int(rng.uniform(0, SECONDS - 10) * FS)
        x[a:a + 5 * FS] += 800 * np.hanning(5 * FS)
    return x


def _tukey(m: int, alpha: float = 0.25) -> np.ndarray:
    """scipy.signal.get_window(("tukey", alpha), m): the periodic Tukey window (m + 1 points, the last dropped)."""
    n = np.arange(m + 1)
    width = int(np.floor(alpha * m / 2))
    w = np.ones(m + 1)
    w[:width + 1] = 0.5 * (1 + np.cos(np.pi * (-1 + 2 * n[:width + 1] / alpha / m)))
    w[m - width:] = 0.5 * (1 + np.cos(np.pi * (-2 / alpha + 1 + 2 * n[m - width:] / alpha / m)))
    return w[:m]


def spectrogram_columns(x: np.ndarray) -> np.ndarray:
    """preprocess_input of one window: [1, 100, columns], float32. scipy's spectrogram (its default
    Tukey window, each segment's mean taken off) in numpy: its density scaling and the one-sided
    doubling are one factor a bin, which the z-score over time takes off again."""
    x = (x - x.mean()) / (x.std() or 1.0)
    segments = np.lib.stride_tricks.sliding_window_view(x, FS)[::FS // 2]
    segments = segments - segments.mean(axis=1, keepdims=True)
    sxx = (np.abs(np.fft.rfft(segments * _tukey(FS), axis=1)) ** 2).T[None, :100]  # [1, 100, columns]
    mu, sd = sxx.mean(axis=2, keepdims=True), sxx.std(axis=2, keepdims=True)
    return ((sxx - mu) / np.where(sd > 0, sd, 1.0)).astype(np.float32)


def ieeg_seizure_windows(model, seed, n):
    rng = seeded(seed + 17)
    return [{"x": spectrogram_columns(ieeg_window(rng))} for _ in range(n)]
