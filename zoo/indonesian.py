"""Indonesian words for g2p-id-py's phoneme BERT (`g2p_id_bert`: a Keras masked language model that
tf2onnx 1.9 wrote at opset 14, IR 7): which `e` of a word is /e/ and which is the schwa /ə/, the one
letter Indonesian spelling leaves ambiguous. Each word is encoded as BERT.predict encodes it: `x` as
`ks`, every `e` replaced by [mask], each letter its id in the shipped token2id.json, padded with 0 to
the config's 32. The words come from the lexicon the wheel ships (resources/lexicon_id.tsv, 27,578
words with their IPA): those of 6-14 letters with an `e`, one in 125 in lexicon order, 16 a batch;
tune and report take alternate ones. Decision (`masked_letters`): the letter predicted at each mask."""

from __future__ import annotations

import functools
import json
import re

import numpy as np

PACKAGE = "g2p-id-py==0.4.2"
BATCH = 16


def _folder():
    from zoo.fetch import _pip_package

    return _pip_package(PACKAGE) / "g2p_id"


@functools.lru_cache(maxsize=1)
def _vocab() -> tuple[dict, dict]:
    bert = _folder() / "models" / "bert"
    token2id = json.loads((bert / "token2id.json").read_text(encoding="utf-8"))
    config = json.loads((bert / "config.json").read_text(encoding="utf-8"))
    return token2id, config


@functools.lru_cache(maxsize=1)
def lexicon_words() -> list[str]:
    """Every 125th lexicon word of 6-14 plain letters that holds an `e` (128 words)."""
    lines = (_folder() / "resources" / "lexicon_id.tsv").read_text(encoding="utf-8").splitlines()
    words = [line.split("\t")[0] for line in lines]
    return [w for w in words if re.fullmatch(r"[a-z]{6,14}", w) and "e" in w][::125]


def encode(word: str) -> list[int]:
    """BERT.predict's ids: x -> ks, each e masked, padded with the pad token to max_seq_length."""
    token2id, config = _vocab()
    letters = ["[mask]" if c == "e" else c for c in word.replace("x", "ks")]
    ids = [token2id[c] for c in letters]
    return ids + [token2id[config["pad_token"]]] * (config["max_seq_length"] - len(ids))


def indonesian_e_words(model, seed, n):
    """Batches of 16 masked words ([16, 32] int64). Tune: the even words (seed 0); report: the odd
    ones (seed 1000); any other seed draws 16 a batch from all of them."""
    words = lexicon_words()
    if seed == 0:
        words = words[0::2]
    elif seed == 1000:
        words = words[1::2]
    else:
        words = [words[i] for i in np.random.default_rng(seed).permutation(len(words))]
    return [{"input_1": np.array([encode(w) for w in words[BATCH * i:BATCH * (i + 1)]], np.int64)}
            for i in range(min(n, len(words) // BATCH))]


def masked_letters(outputs, feed):
    """The letter (argmax of 32) BERT writes at each [mask]; the package writes it in place of the e."""
    token2id, config = _vocab()
    logits = np.asarray(next(iter(outputs.values())))
    return logits[feed["input_1"] == token2id[config["mask_token"]]].argmax(-1), False
