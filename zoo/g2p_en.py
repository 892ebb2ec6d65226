"""g2p_en (PyPI g2p-en 2.1.0): English grapheme-to-phoneme, a GRU encoder-decoder whose trained
weights ship in the wheel as numpy arrays (g2p_en/checkpoint20.npz, 3.3 MB); the package runs them
in numpy (G2p.predict) for words that are not in CMUdict. Exported here with torch's TorchScript
exporter as a pair, the decoder carrying its state in and out as a KV-cached decoder carries its
cache:

- g2p_en_encoder: `graphemes` [B, T] int64 (a word's letters, then </s>) -> `hidden` [1, B, 256]
- g2p_en_decoder: `phonemes` [B, S] int64 (<s>, then the phonemes so far), `hidden` [1, B, 256]
  (the encoder's, or the decoder's own from the last call) -> `logits` [B, S, 74], `hidden_out`

Inputs: words coined this century (not in CMUdict, so the package predicts them), 4 of one
length a batch (no padding enters: G2p.predict reads one word at a time). Tune and report words
are alternate halves of one list. The decoder's samples are the greedy decoding of a batch cut in
two calls: the first call reads <s> and the first phonemes with the encoder's state, the second
the rest with the state the first returned (the cache carried).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

GRAPHEMES = ["<pad>", "<unk>", "</s>"] + list("abcdefghijklmnopqrstuvwxyz")  # as G2p.__init__
START, END, N_PHONEMES = 2, 3, 74
PACKAGE = "g2p-en==2.1.0"

# 8 words of each length 6-9; even places tune, odd places report
WORDS = {
    6: ["selfie", "emojis", "zoomer", "doomer", "brexit", "vaping", "hangry", "yeeted"],
    7: ["vlogger", "podcast", "memeify", "bitcoin", "chatbot", "ghosted", "fintech", "cosplay"],
    8: ["unfriend", "hashtags", "googling", "webinars", "glamping", "deepfake", "unboxing", "bromance"],
    9: ["crowdfund", "photobomb", "upcycling", "mansplain", "clickbait", "adorkable", "wikipedia", "instagram"],
}


def _gru(torch, w: dict, prefix: str):
    gru = torch.nn.GRU(256, 256, batch_first=True)  # gates r, z, n and the reset after W_hn: as grucell
    for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
        getattr(gru, f"{name.replace('w_', 'weight_').replace('b_', 'bias_')}_l0").data = torch.from_numpy(
            w[f"{prefix}_{name}"])
    return gru


def _weights(package_dir: Path) -> dict:
    with np.load(package_dir / "g2p_en" / "checkpoint20.npz") as z:
        return {k: z[k].astype(np.float32) for k in z.files}


def encoder(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    w = _weights(package_dir)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding.from_pretrained(torch.from_numpy(w["enc_emb"]))
            self.gru = _gru(torch, w, "enc")

        def forward(self, graphemes):
            return self.gru(self.emb(graphemes))[1]

    _export(torch, Encoder().eval(), (torch.zeros(2, 5, dtype=torch.int64),), out, ["graphemes"], ["hidden"],
            {"graphemes": {0: "batch", 1: "letters"}, "hidden": {1: "batch"}})


def decoder(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    w = _weights(package_dir)

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding.from_pretrained(torch.from_numpy(w["dec_emb"]))
            self.gru = _gru(torch, w, "dec")
            self.fc = torch.nn.Linear(256, N_PHONEMES)
            self.fc.weight.data, self.fc.bias.data = torch.from_numpy(w["fc_w"]), torch.from_numpy(w["fc_b"])

        def forward(self, phonemes, hidden):
            states, hidden_out = self.gru(self.emb(phonemes), hidden)
            return self.fc(states), hidden_out

    feeds = (torch.zeros(2, 3, dtype=torch.int64), torch.zeros(1, 2, 256))
    _export(torch, Decoder().eval(), feeds, out, ["phonemes", "hidden"], ["logits", "hidden_out"],
            {"phonemes": {0: "batch", 1: "steps"}, "hidden": {1: "batch"}, "logits": {0: "batch", 1: "steps"},
             "hidden_out": {1: "batch"}})


def _export(torch, model, args, out: Path, names_in, names_out, axes) -> None:
    with torch.no_grad():
        torch.onnx.export(model, args, str(out), input_names=names_in, output_names=names_out, dynamic_axes=axes,
                          opset_version=17, dynamo=False)


def _words(seed: int, n: int) -> list[np.ndarray]:
    """n batches of 4 words of one length, as G2p.encode encodes them (letters, then </s>)."""
    lengths = sorted(WORDS)
    batches = []
    for i in range(n):
        words = WORDS[lengths[i % len(lengths)]][(0 if seed < 1000 else 1)::2]
        batches.append(np.array([[GRAPHEMES.index(c) for c in w] + [GRAPHEMES.index("</s>")] for w in words],
                                np.int64))
    return batches


def g2p_words(model, seed, n):
    return [{"graphemes": g} for g in _words(seed, n)]


@lru_cache(maxsize=1)
def _sessions():
    import onnxruntime as ort

    from zoo.sources import dependency

    return tuple(ort.InferenceSession(str(dependency(name)), providers=["CPUExecutionProvider"])
                 for name in ("g2p_en_encoder", "g2p_en_decoder"))


def greedy(hidden: np.ndarray, steps: int = 20) -> np.ndarray:
    """The shipped decoder's greedy phonemes [B, steps] from an encoder state, one step a call with
    the state carried (as G2p.predict; it stops at </s>, which the caller reads)."""
    dec = _sessions()[1]
    token = np.full((hidden.shape[1], 1), START, np.int64)
    out = []
    for _ in range(steps):
        logits, hidden = dec.run(None, {"phonemes": token, "hidden": hidden})
        token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        out.append(token)
    return np.concatenate(out, axis=1)


def g2p_steps(model, seed, n):
    """Sample pairs: the decoding of one batch of words, cut in two calls, the state carried.
    n samples: n // 2 batches (n even), call 1 then call 2 of each."""
    enc = _sessions()[0]
    feeds = []
    for graphemes in _words(seed, max(1, n // 2)):
        (hidden,) = enc.run(None, {"graphemes": graphemes})
        phonemes = greedy(hidden, len(graphemes[0]) + 2)
        prefix = np.concatenate([np.full((len(phonemes), 1), START, np.int64), phonemes[:, :-1]], axis=1)
        cut = prefix.shape[1] // 2
        first = {"phonemes": prefix[:, :cut], "hidden": hidden}
        _, carried = _sessions()[1].run(None, first)
        feeds += [first, {"phonemes": prefix[:, cut:], "hidden": carried}]
    return feeds[:n]


def pronunciation(outputs, feed):
    """The encoder's decision: the word's phonemes, greedily decoded from its state by the shipped
    decoder, up to each word's </s> (after it, <pad>)."""
    phonemes = greedy(np.asarray(next(iter(outputs.values()))))
    ended = np.cumsum(phonemes == END, axis=1) > 0  # shifted by one below: </s> itself is kept
    return np.where(np.concatenate([np.zeros((len(phonemes), 1), bool), ended[:, :-1]], axis=1), 0,
                    phonemes).ravel(), False
