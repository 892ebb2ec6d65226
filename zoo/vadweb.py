"""Speech for silero-vad v5 as @ricky0123/vad-web ships it (`silero_vad_v5_web`): espeak-ng
utterances (zoo/speech.py) between 0.3-0.6 s of room noise, cut into the 512-sample windows at
16 kHz with the 64 samples before each that vad-web's FrameProcessor feeds (576 samples), the
state carried from window to window by the shipped model itself.

A sample is a batch of 8 windows from 8 points of the utterances, each with the state the shipped
model reached there (stacked into [2, 8, 128]) and `sr` = 16000, the int64 scalar that picks the
If branch holding the 16 kHz network. Decision (decisions.speech_prob): each window's probability
over 0.5, vad-web's positiveSpeechThreshold."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from zoo.sources import seeded
from zoo.speech import SPEECH, _speak

WINDOW, CONTEXT, BATCH = 512, 64, 8


def _streams(seed: int, n: int) -> list[np.ndarray]:
    rng = seeded(seed)
    order = rng.permutation(len(SPEECH))
    voices = ["en-us", "en-us+m3", "en", "en-us+f2"]
    streams = []
    for i in range(n):
        speech = _speak(SPEECH[order[i % len(SPEECH)]], int(rng.integers(30, 70)), int(rng.integers(120, 160)),
                        voices[int(rng.integers(len(voices)))])
        gap = lambda: (rng.normal(0, 0.003, int(rng.uniform(0.3, 0.6) * 16000))).astype(np.float32)  # noqa: E731
        streams.append(np.concatenate([gap(), speech * np.float32(rng.uniform(0.3, 1.0)), gap()]))
    return streams


def _windows(signal: np.ndarray) -> list[np.ndarray]:
    signal = np.concatenate([np.zeros(CONTEXT, np.float32), signal])
    return [signal[k - CONTEXT:k + WINDOW] for k in range(CONTEXT, signal.size - WINDOW + 1, WINDOW)]


def vad_web_windows(model, seed, n):
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = seeded(seed + 1)
    feeds = []
    for signal in _streams(seed, n):
        windows, states = _windows(signal), []
        state = np.zeros((2, 1, 128), np.float32)
        for w in windows:  # the state each window is read with, as the shipped model carries it
            states.append(state)
            _, state = sess.run(None, {"input": w[None], "state": state, "sr": np.array(16000, np.int64)})
        picks = np.sort(rng.choice(len(windows), min(BATCH, len(windows)), replace=False))
        feeds.append({"input": np.stack([windows[k] for k in picks]),
                      "state": np.concatenate([states[k] for k in picks], axis=1),
                      "sr": np.array(16000, np.int64)})
    return feeds
