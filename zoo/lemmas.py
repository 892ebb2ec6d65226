"""French words for pyfrspell's lemmatizer (a GRU seq2seq whose GRU weights quantize_dynamic left
int8 behind DequantizeLinear, as shipped): inflected forms written for the zoo (verbs conjugated,
plurals, feminines), each encoded as its predictor encodes them (a character's id in the shipped
vocabulary, then <eos>); the target prefix is <bos> and the shipped model's own greedy lemma, as
the romanizer's decoder steps are made."""

from __future__ import annotations

import functools
import json

import numpy as np
import onnxruntime as ort

PYFRSPELL = "pyfrspell==0.1.1"

# tune on the first half, report on the second: different words, the same kinds of inflection
WORDS = ["mangeaient", "chevaux", "belles", "finissons", "allèrent", "journaux", "heureuse", "prenions",
         "voyageurs", "écrivîmes", "nouvelles", "buvait", "genoux", "sportives", "courraient", "fleurs",
         "chantèrent", "animaux", "grandes", "choisissez", "viendront", "bijoux", "créatrice", "lisions",
         "maisons", "descendîmes", "vieilles", "savaient", "travaux", "actives", "ouvrirent", "enfants"]


def _folder():
    from zoo.fetch import _pip_package

    return _pip_package(PYFRSPELL) / "pyfrspell" / "models" / "community"


@functools.lru_cache(maxsize=1)
def _vocab() -> dict:
    itos = json.loads((_folder() / "lemma_type_vocab.json").read_text(encoding="utf-8"))["itos"]
    return {t: i for i, t in enumerate(itos)}


def _greedy(session: ort.InferenceSession, src: np.ndarray, limit: int = 32) -> list[int]:
    stoi = _vocab()
    tgt = [stoi["<bos>"]]
    for _ in range(limit):
        logits = session.run(["token_logits"], {"src": src, "tgt_in": np.array([tgt], np.int64)})[0]
        nxt = int(logits[0, -1].argmax())
        if nxt == stoi["<eos>"]:
            break
        tgt.append(nxt)
    return tgt


def french_lemma_words(model, seed, n):
    """One word a sample: src = its characters' ids and <eos>; tgt_in = <bos> and the shipped
    model's greedy lemma (the teacher-forced pass its last decoding step runs)."""
    stoi = _vocab()
    words = WORDS[: len(WORDS) // 2] if seed == 0 else WORDS[len(WORDS) // 2:]
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feeds = []
    for w in words[:n]:
        src = np.array([[stoi.get(c, stoi["<unk>"]) for c in w] + [stoi["<eos>"]]], np.int64)
        feeds.append({"src": src, "tgt_in": np.array([_greedy(session, src)], np.int64)})
    return feeds
