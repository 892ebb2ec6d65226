"""Music for Spotify's Basic Pitch (`basic_pitch_nmp`: basic-pitch 0.4.0's ICASSP 2022 model by
tf2onnx, a polyphonic note transcriber whose constant-Q transform is in the graph: raw audio in).

Pieces synthesized as zoo/music.py makes them for the key recognizer (a bar of a chord progression
in piano-like tones, a bass, a melody on most), 2 s at 44.1 kHz, resampled to Basic Pitch's
22050 Hz by keeping the lower half of the spectrum (band-limited, no aliasing), and windowed as its
`get_audio_input` windows a file: half the 30 overlapping frames' length (3840 samples) of zeros
first, then the first window of AUDIO_N_SAMPLES (43844) samples, [1, 43844, 1]. The tune set's keys
are music.KEYS' even ones, the report set's its odd ones. Decision (decisions.note_events): each
frame's notes over 0.3 and onsets over 0.5 (its predict()'s frame and onset thresholds).
"""

from __future__ import annotations

import numpy as np

from zoo.music import KEYS, RATE, _piece
from zoo.sources import seeded

BP_RATE, N_SAMPLES, OVERLAP = 22050, 22050 * 2 - 256, 30 * 256


def _halved(signal: np.ndarray) -> np.ndarray:
    """44.1 kHz -> 22.05 kHz: the spectrum below 11025 Hz kept, the rest dropped."""
    spectrum = np.fft.rfft(signal)
    return (np.fft.irfft(spectrum[:len(signal) // 4 + 1], len(signal) // 2) / 2).astype(np.float32)


def piano_windows(model, seed, n):
    rng = seeded(seed)
    keys = KEYS[0::2] if seed == 0 else KEYS[1::2]
    order = rng.permutation(len(keys))
    feeds = []
    for i in range(n):
        audio = _halved(_piece(rng, *keys[order[i % len(keys)]], seconds=2 * N_SAMPLES / BP_RATE))
        window = np.concatenate([np.zeros(OVERLAP // 2, np.float32), audio])[:N_SAMPLES]
        feeds.append({"serving_default_input_2:0": window.reshape(1, N_SAMPLES, 1)})
    assert RATE == 2 * BP_RATE
    return feeds
