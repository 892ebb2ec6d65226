"""Resemblyzer (PyPI 0.1.4, Resemble AI): the GE2E speaker encoder of "Generalized End-to-End Loss
for Speaker Verification" (Wan et al. 2018), trained on LibriSpeech, VoxCeleb 1 and 2, shipped as
`resemblyzer/pretrained.pt` (17 MB: the weights and the training state). A 3-layer LSTM of 256 over
40 mel bands, a Linear of 256 and a ReLU on the last layer's final hidden state, L2-normed: the
zoo's first speaker embedding net with a decision (voicefilter_embedder's has none).

Exported here with the package's own VoiceEncoder (its audio module, which imports librosa and
webrtcvad, neither installed here, is stubbed: the encoder's forward does not read it), by torch's
TorchScript exporter at opset 11, the opset of the exporters of its time (2019-2020). The export is
checked against the package's module on the tune and report partials.

- resemblyzer_speaker: `mels` [B, 160, 40] (1.6 s partial utterances: mel power, not log) ->
  `embeds` [B, 256]

Inputs (`speaker_partials`): espeak-ng speech, each utterance as the package's preprocess_wav and
wav_to_mel_spectrogram make it (normalized to -30 dBFS, librosa's centered 400-point STFT, hop 160,
power 2, 40 Slaney mels; webrtcvad's trimming of long silences left out: espeak-ng leaves none), its
first partial of 160 frames (embed_utterance's first slice). A sample is 4 voices x 2 sentences,
8 different sentences; tune voices (seed 0) and report ones (seed 1000) are disjoint. Decision
(`nearest_speaker`): each partial's nearest other partial of the sample by the embeddings' cosine,
what a speaker verification threshold or a diarization clustering turns on.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

PACKAGE = "resemblyzer==0.1.4"
TOLERANCE = 1e-4  # of the embeddings' largest magnitude, the export against the package's module
FRAMES = 160  # hparams.partials_n_frames
SENTENCES = [
    "the quick brown fox jumps over the lazy dog", "please call me a taxi to the station",
    "it is going to rain this afternoon", "set a timer for ten minutes before dinner",
    "good morning, how did you sleep last night", "the train leaves at half past seven",
    "she sells sea shells by the sea shore", "my phone number ends in four five six",
]
# espeak-ng voices (variant, pitch): tune and report speakers are disjoint
VOICES = {0: [("en-us+m3", 40), ("en-us+f2", 60), ("en+m1", 50), ("en-us+f4", 55), ("en+klatt", 45)],
          1000: [("en-us+m7", 35), ("en-us+f3", 65), ("en+m5", 45), ("en-us+f1", 60), ("en+klatt2", 50)]}


def _package_encoder(package_dir: Path):
    """The package's own VoiceEncoder, its audio module (librosa, webrtcvad) stubbed."""
    root = package_dir / "resemblyzer"
    saved = {k: sys.modules.get(k) for k in ("resemblyzer", "resemblyzer.audio", "resemblyzer.hparams",
                                             "resemblyzer.voice_encoder")}
    pkg = types.ModuleType("resemblyzer")
    pkg.__path__ = [str(root)]
    sys.modules["resemblyzer"] = pkg
    sys.modules["resemblyzer.audio"] = pkg.audio = types.ModuleType("resemblyzer.audio")
    try:
        import importlib

        module = importlib.import_module("resemblyzer.voice_encoder")
        return module.VoiceEncoder(device="cpu", verbose=False)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def export(package_dir: Path, path_in_package: str, out: Path) -> None:
    import onnxruntime as ort
    import torch

    encoder = _package_encoder(package_dir).eval()
    assert (package_dir / path_in_package).is_file()
    mels = torch.zeros(2, FRAMES, 40)
    torch.onnx.export(encoder, (mels,), str(out), input_names=["mels"], output_names=["embeds"],
                      dynamic_axes={"mels": {0: "batch"}, "embeds": {0: "batch"}}, opset_version=11,
                      dynamo=False)
    x = np.concatenate([f["mels"] for seed in (0, 1000) for f in speaker_partials(None, seed, 2)])
    with torch.no_grad():
        want = encoder(torch.from_numpy(x)).numpy()
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"mels": x})[0]
    if np.abs(got - want).max() > TOLERANCE * np.abs(want).max():
        out.unlink()
        raise RuntimeError("the Resemblyzer export does not compute the package's embeddings")


def mel_spectrogram(wav: np.ndarray) -> np.ndarray:
    """resemblyzer.audio.wav_to_mel_spectrogram: librosa.feature.melspectrogram(sr=16000, n_fft=400,
    hop_length=160, n_mels=40): centered frames (zero padding, librosa >= 0.10), a periodic Hann
    window, power 2, Slaney mels -> [frames, 40] float32."""
    from zoo.speech import slaney_mel

    x = np.pad(wav.astype(np.float64), 200)
    frames = np.stack([x[i:i + 400] for i in range(0, len(x) - 399, 160)])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    return (slaney_mel(40, 400) @ power.T).T.astype(np.float32)


def _partial(wav: np.ndarray) -> np.ndarray:
    """preprocess_wav's volume normalization (to -30 dBFS, increase only), leading and trailing
    silence cut, then embed_utterance's first slice of 160 frames (the wave zero-padded to cover it)."""
    loud = np.flatnonzero(np.abs(wav) > 0.01)
    wav = wav[loud[0]:loud[-1] + 1]
    rms = np.sqrt(np.mean((wav * 32767.0) ** 2))
    change = -30 - 20 * np.log10(rms / 32767.0)
    if change > 0:
        wav = wav * 10 ** (change / 20)
    need = FRAMES * 160
    wav = np.pad(wav, (0, max(0, need - len(wav))))
    return mel_spectrogram(wav)[:FRAMES]


def speaker_partials(model, seed, n):
    """4 voices x 2 sentences a sample (voice-major), no sentence twice: voices and sentences rotate."""
    from zoo.speech import _speak

    voices = VOICES[0 if seed < 1000 else 1000]
    feeds = []
    for i in range(n):
        batch = []
        for v in range(4):
            voice, pitch = voices[(i + v) % len(voices)]
            for s in range(2):
                batch.append(_partial(_speak(SENTENCES[(i + 2 * v + s) % len(SENTENCES)], pitch, 150, voice)))
        feeds.append({"mels": np.stack(batch)})
    return feeds


def nearest_speaker(outputs, feed):
    """Each partial's nearest other partial of the sample by cosine (the embeddings are L2-normed)."""
    e = np.asarray(next(iter(outputs.values())), np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    sim = e @ e.T
    np.fill_diagonal(sim, -np.inf)
    return sim.argmax(1), False
