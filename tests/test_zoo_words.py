"""The ninth round's zoo inputs (zoo/words.py, zoo/titles.py) where they need no package: typos that
keep a word's length, tune and report halves that share nothing, and the retrieval decision on one
vector a row (chars2vec's output)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions, titles, words  # noqa: E402


def test_a_typo_keeps_the_length_and_the_ends():
    rng = np.random.default_rng(0)
    for w in words._english_words():
        t = words._typo(w, rng)
        assert len(t) == len(w) and t[0] == w[0] and t[-1] == w[-1]
        assert t != w  # "eiffel": a swap of its two f's was no typo


def test_tune_and_report_share_no_word_and_no_sentence():
    w = words._english_words()
    assert len(w) > 40 and not set(w[0::2]) & set(w[1::2])
    assert not set(words.KHMER[:8]) & set(words.KHMER[8:])
    assert not set(titles.SPANS[:8]) & set(titles.SPANS[8:])


def test_retrieval_reads_one_vector_a_row():
    emb = np.array([[1, 0, 0], [0, 1, 0], [0, 1, 0.1], [1, 0, 0.1]], np.float32)  # words, then typos
    got, sparse = decisions.retrieval({"lstm_2": emb}, {})
    assert not sparse and got.tolist() == [1, 0]
