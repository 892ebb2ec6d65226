"""Spoken hotwords for EfficientWord-Net's few-shot hotword embedder (`effword_resnet50_arc`,
thirty-seventh round): efficientword-net 1.0.5 ships a ResNet-50 trained with an ArcFace loss
(torch 2.0, opset 14, 87.6 MB) that maps 1.5 s of speech to a unit 2048-d vector, and the
reference vectors of seven hotwords (sample_refs/*_ref.json: alexa, balloon, computer, lights off,
lights on, mobile, mycroft; 7 recordings each). A detector scores a window by its best cosine
against one hotword's references ((cos + 1) / 2, Resnet50_Arc_loss.scoreVector).

Inputs as the package makes them (HotwordDetector.scoreFrame -> audioToVector): the utterance's
zero padding stripped, zeros added either side up to 24,000 samples (the package draws the split
at random: here a seeded one), 64 log filterbank energies of 25 ms frames every 10 ms (its
audio_utils.logfbank: python_speech_features' fbank with no pre-emphasis and a rectangular window,
written out in numpy below), [1, 1, 149, 64]. The speech: each hotword spoken by espeak-ng,
voices, pitch and speed drawn per set (tune seed 0, report seed 1000), one utterance a sample.
Spoken so, the shipped model retrieves the word said for 19 of 21 utterances (lights on takes
lights off's references for two).

Decision (`hotword_match`): the hotword whose references score highest, and whether that score
reaches 0.7 (the threshold of the package's own examples).
"""

from __future__ import annotations

import functools
import json

import numpy as np

from zoo.sources import input_names, seeded

PACKAGE = "efficientword-net==1.0.5"
HOTWORDS = ["alexa", "balloon", "computer", "lights_off", "lights_on", "mobile", "mycroft"]
WINDOW = 24000  # 1.5 s at 16 kHz
VOICES = ["en-us", "en", "en-us+f3", "en-us+m3", "en-gb-x-rp", "en-us+f2"]


@functools.lru_cache(maxsize=1)
def references() -> np.ndarray:
    """[7 hotwords, 7 recordings, 2048]: the package's sample_refs, in HOTWORDS' order."""
    from zoo.fetch import _pip_package

    refs = _pip_package(PACKAGE) / "eff_word_net" / "sample_refs"
    return np.stack([np.asarray(json.loads((refs / f"{w}_ref.json").read_text())["embeddings"], np.float32)
                     for w in HOTWORDS])


@functools.lru_cache(maxsize=1)
def _filterbank(nfilt: int = 64, nfft: int = 512, rate: int = 16000) -> np.ndarray:
    """python_speech_features' triangular mel filters (get_filterbanks), [nfilt, nfft / 2 + 1]."""
    mel = np.linspace(0, 2595 * np.log10(1 + rate / 2 / 700.0), nfilt + 2)
    bins = np.floor((nfft + 1) * (700 * (10 ** (mel / 2595.0) - 1)) / rate)
    fb = np.zeros([nfilt, nfft // 2 + 1])
    for j in range(nfilt):
        for i in range(int(bins[j]), int(bins[j + 1])):
            fb[j, i] = (i - bins[j]) / (bins[j + 1] - bins[j])
        for i in range(int(bins[j + 1]), int(bins[j + 2])):
            fb[j, i] = (bins[j + 2] - i) / (bins[j + 2] - bins[j + 1])
    return fb


def logfbank(audio: np.ndarray) -> np.ndarray:
    """The package's logfbank(samplerate=16000, winlen=0.025, winstep=0.01, nfilt=64, nfft=512,
    preemph=0.0): 400-sample frames every 160, the last one zero padded, |rfft|^2 / 512."""
    n = 1 + int(np.ceil((len(audio) - 400) / 160))
    padded = np.concatenate([audio.astype(np.float64), np.zeros((n - 1) * 160 + 400 - len(audio))])
    frames = np.lib.stride_tricks.sliding_window_view(padded, 400)[::160][:n]
    power = np.square(np.abs(np.fft.rfft(frames, 512))) / 512
    feat = power @ _filterbank().T
    return np.log(np.where(feat == 0, np.finfo(float).eps, feat))


def _window(audio: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """fixPaddingIssues: zeros stripped from both ends, then padded (a drawn split) or cropped."""
    nz = np.flatnonzero(audio)
    audio = audio[nz[0]:nz[-1] + 1] if len(nz) else audio
    if len(audio) >= WINDOW:
        start = int(rng.integers(0, len(audio) - WINDOW + 1))
        return audio[start:start + WINDOW]
    front = int(rng.integers(0, WINDOW - len(audio) + 1))
    return np.concatenate([np.zeros(front), audio, np.zeros(WINDOW - len(audio) - front)])


def hotword_utterances(model, seed, n):
    """n utterances, the hotwords in turn, each in a voice, pitch and speed drawn from the seed."""
    from zoo.speech import _speak

    rng = seeded(seed)
    name = input_names(model)[0].name
    feeds = []
    for i in range(n):
        word = HOTWORDS[i % len(HOTWORDS)].replace("_", " ")
        voice = VOICES[int(rng.integers(len(VOICES)))]
        audio = _speak(word, int(rng.integers(30, 70)), int(rng.integers(130, 170)), voice)
        feeds.append({name: logfbank(_window(audio, rng))[None, None].astype(np.float32)})
    return feeds


def hotword_match(outputs, feed):
    """Per utterance: the hotword whose references score highest, and that score over 0.7."""
    e = np.asarray(next(iter(outputs.values())), np.float32).reshape(-1, 2048)
    scores = ((np.einsum("wrd,nd->nwr", references(), e) + 1) / 2).max(-1)  # [n, 7]
    return np.stack([scores.argmax(-1), scores.max(-1) >= 0.7], -1).ravel().astype(np.int64), False
