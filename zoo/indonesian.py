"""Indonesian words for g2p-id-py's phoneme BERT (`g2p_id_bert`: a Keras masked language model that
tf2onnx 1.9 wrote at opset 14, IR 7): which `e` of a word is /e/ and which is the schwa /ə/, the one
letter Indonesian spelling leaves ambiguous. Each word is encoded as BERT.predict encodes it: `x` as
`ks`, every `e` replaced by [mask], each letter its id in the shipped token2id.json, padded with 0 to
the config's 32. The words come from the lexicon the wheel ships (resources/lexicon_id.tsv, 27,578
words with their IPA): those of 6-14 letters with an `e`, one in 125 in lexicon order, 16 a batch;
tune and report take alternate ones. Decision (`masked_letters`): the letter predicted at each mask.

The wheel's other model, a Keras LSTM seq2seq (`g2p_id_lstm_decoder`: tf2onnx's LSTM op, its states in
and out), reads the same words: `indonesian_decoder_steps`, decision `phonemes_to_end`."""

from __future__ import annotations

import functools
import json
import re

import numpy as np

PACKAGE = "g2p-id-py==0.4.2"
BATCH = 16
# the ids the decisions look for, as the wheel's json files give them (token2id.json's "[mask]",
# p2id.json's "\n", the config's eos_token): the decisions read no file
MASK_ID, EOS_ID = 30, 1


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


def indonesian_words(seed: int) -> list[str]:
    """Tune: the even lexicon words (seed 0); report: the odd ones (seed 1000); any other seed: all of
    them, shuffled."""
    words = lexicon_words()
    if seed == 0:
        return words[0::2]
    if seed == 1000:
        return words[1::2]
    return [words[i] for i in np.random.default_rng(seed).permutation(len(words))]


def encode(word: str) -> list[int]:
    """BERT.predict's ids: x -> ks, each e masked, padded with the pad token to max_seq_length."""
    token2id, config = _vocab()
    letters = ["[mask]" if c == "e" else c for c in word.replace("x", "ks")]
    ids = [token2id[c] for c in letters]
    return ids + [token2id[config["pad_token"]]] * (config["max_seq_length"] - len(ids))


def indonesian_e_words(model, seed, n):
    """Batches of 16 masked words ([16, 32] int64). Tune: the even words (seed 0); report: the odd
    ones (seed 1000); any other seed draws 16 a batch from all of them."""
    words = indonesian_words(seed)
    return [{"input_1": np.array([encode(w) for w in words[BATCH * i:BATCH * (i + 1)]], np.int64)}
            for i in range(min(n, len(words) // BATCH))]


def masked_letters(outputs, feed):
    """The letter (argmax of 32) BERT writes at each [mask]; the package writes it in place of the e."""
    logits = np.asarray(next(iter(outputs.values())))
    return logits[feed["input_1"] == MASK_ID].argmax(-1), False


# ---- the LSTM seq2seq beside it (`g2p_id_lstm_decoder`): Keras's lstm_seq2seq, one-hot in and out ----
def _lstm(name: str) -> dict:
    return json.loads((_folder() / "models" / "lstm" / name).read_text(encoding="utf-8"))


def _one_hot(ids: np.ndarray, depth: int) -> np.ndarray:
    return np.eye(depth, dtype=np.float32)[ids]


def indonesian_decoder_steps(model, seed, n):
    """The decoder teacher-forced on its own greedy output, as LSTM.predict decodes a word one step at a
    time: a batch of 16 words (the BERT's tune or report words) encoded by the shipped encoder
    (one-hot letters padded with " " to 24, as predict pads them) for input_3 and input_4; input_2 is
    <bos> (a tab) then the shipped decoder's greedy phonemes, carried step by step with its states,
    up to the batch's last end (a newline) or the config's 25 steps."""
    import onnxruntime as ort

    config, g2id, p2id = _lstm("config.json"), _lstm("g2id.json"), _lstm("p2id.json")
    folder = _folder() / "models" / "lstm"
    encoder = ort.InferenceSession(str(folder / "encoder_model.onnx"), providers=["CPUExecutionProvider"])
    decoder = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    words = [w for w in indonesian_words(seed) if len(w) <= config["max_encoder_seq_length"] and set(w) <= set(g2id)]
    feeds = []
    for i in range(min(n, len(words) // BATCH)):
        batch = words[BATCH * i:BATCH * (i + 1)]
        ids = np.full((BATCH, config["max_encoder_seq_length"]), g2id[config["pad_token"]], np.int64)
        for row, word in enumerate(batch):
            ids[row, :len(word)] = [g2id[c] for c in word]
        h, c = encoder.run(None, {"input_1": _one_hot(ids, config["num_encoder_tokens"])})
        tokens = [np.full(BATCH, p2id[config["bos_token"]], np.int64)]
        state, ended = (h, c), np.zeros(BATCH, bool)
        while not ended.all() and len(tokens) < config["max_decoder_seq_length"]:
            step = _one_hot(tokens[-1][:, None], config["num_decoder_tokens"])
            out, *state = decoder.run(None, {"input_2": step, "input_3": state[0], "input_4": state[1]})
            tokens.append(out[:, -1].argmax(-1))
            ended |= tokens[-1] == p2id[config["eos_token"]]
        feeds.append({"input_2": _one_hot(np.stack(tokens[:-1], 1), config["num_decoder_tokens"]),
                      "input_3": h, "input_4": c})
    return feeds


def phonemes_to_end(outputs, feed):
    """The phoneme (argmax of 32) at each step up to and including each word's end: the steps whose
    input is not yet past a newline (LSTM.predict stops there)."""
    logits = np.asarray(next(iter(outputs.values())))
    live = np.cumsum(feed["input_2"].argmax(-1) == EOS_ID, axis=1) == 0
    return logits.argmax(-1)[live], False
