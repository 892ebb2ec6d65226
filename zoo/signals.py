"""Task inputs for biosignal models (zoo/models.py `inputs`): synthetic sleep EEG, built the way
the model's own package feeds it.

OpenSpindleNet (brainmaze-eeg-models' spindle detector) reads 30 s windows at 250 Hz: the
z-scored raw signal [n, 1, 7500] and the z-scored magnitude of a complex Shannon ('shan6-13')
wavelet transform at 15 scales [n, 15, 7500] (the package's spindles/_cwt.py, whose scipy.fft
calls are numpy.fft's here: the same transform, so that the zoo needs no scipy).

The signal: 1/f ("pink") background noise, a slow delta and a theta rhythm as in stage-2 sleep,
and 2-5 sleep spindles per window (11-16 Hz bursts of 0.5-2 s under a Hann envelope) at random
places; the spindles are what the detector's decisions are about.
"""

from __future__ import annotations

import functools

import numpy as np

FS = 250.0
WINDOW = 7500
SCALES = np.geomspace(135, 270, num=15)
_B, _C = 6.0, 13.0  # 'shan6-13': bandwidth 6, centre frequency 13
_PRECISION = 10


def _pink(rng: np.random.Generator, n: int) -> np.ndarray:
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / FS)
    spectrum[1:] /= np.sqrt(f[1:])
    spectrum[0] = 0
    x = np.fft.irfft(spectrum, n)
    return x / x.std()


def sleep_eeg(rng: np.random.Generator) -> np.ndarray:
    """One 30 s window of synthetic stage-2 sleep EEG (microvolts), with its spindles."""
    t = np.arange(WINDOW) / FS
    x = 20 * _pink(rng, WINDOW)
    x += 25 * np.sin(2 * np.pi * rng.uniform(0.5, 2.0) * t + rng.uniform(0, 2 * np.pi))
    x += 8 * np.sin(2 * np.pi * rng.uniform(4.0, 7.0) * t + rng.uniform(0, 2 * np.pi))
    for _ in range(rng.integers(2, 6)):
        length = int(rng.uniform(0.5, 2.0) * FS)
        start = rng.integers(0, WINDOW - length)
        burst = np.sin(2 * np.pi * rng.uniform(11.0, 16.0) * t[:length]) * np.hanning(length)
        x[start:start + length] += rng.uniform(20, 50) * burst
    return x


@functools.lru_cache(maxsize=1)
def _plan(n: int):
    """FFT length, kernel spectra and output offsets of the 15-scale transform (_cwt.py's _plan)."""
    x = np.linspace(-20.0, 20.0, 2 ** _PRECISION)
    psi = np.sqrt(_B) * np.sinc(_B * x) * np.exp(2j * np.pi * _C * x)
    step = x[1] - x[0]
    int_psi = np.conj(np.cumsum(psi) * step)
    kernels = []
    for s in SCALES:
        j = (np.arange(s * (x[-1] - x[0]) + 1) / (s * step)).astype(int)
        kernels.append(int_psi[j[j < int_psi.size]][::-1])
    nfft = n + max(k.size for k in kernels)
    spectra = np.stack([-np.sqrt(s) * np.fft.fft(np.diff(np.concatenate(([0.0], k, [0.0]))), nfft)
                        for s, k in zip(SCALES, kernels)])
    offsets = [int(np.floor((k.size - 2) / 2.0)) + 1 for k in kernels]
    return nfft, spectra, offsets


def scalogram(x: np.ndarray) -> np.ndarray:
    """|CWT| of each window [n, 7500] at the 15 scales: [n, 15, 7500]."""
    nfft, spectra, offsets = _plan(x.shape[-1])
    spectrum = np.fft.fft(x, nfft, axis=-1)
    out = np.empty((x.shape[0], len(offsets), x.shape[-1]))
    for i, off in enumerate(offsets):
        out[:, i] = np.abs(np.fft.ifft(spectrum * spectra[i], axis=-1)[:, off:off + x.shape[-1]])
    return out


def _normalize(a: np.ndarray) -> np.ndarray:
    """Per-row z-score over the last axis (the package's _normalize)."""
    return (a - a.mean(axis=-1, keepdims=True)) / a.std(axis=-1, keepdims=True)


def eeg_spindle_windows(model, seed, n):
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(n):
        window = sleep_eeg(rng)[None]
        raw = _normalize(window[:, None, :]).astype(np.float32)
        spec = _normalize(scalogram(window - window.mean(axis=-1, keepdims=True))).astype(np.float32)
        feeds.append({"raw_signal": raw, "spectrogram": spec})
    return feeds
