"""Invariant 14's runs: a decoder with a KV cache (optimum's or the genai builder's names: past_*
inputs, present* outputs, `input_ids`, `logits` first) decoded as it is used, greedily, each call
fed the cache its own last call returned and the token it chose. The report set's samples carry
the original's cache into every call, so a result's error in its cache never reaches its next
step there; here it does, for STEPS calls from each chain's first sample (a chain: samples whose
past grows by the tokens of the one before)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

STEPS = 12


def _past(feed: dict) -> list[str]:
    return sorted(k for k in feed if k.lower().startswith("past"))


def applies(feeds: list[dict]) -> bool:
    return bool(feeds) and "input_ids" in feeds[0] and bool(_past(feeds[0]))


def chain_starts(feeds: list[dict]) -> list[dict]:
    """The samples that start a chain: their cache is not the one before's grown by its tokens."""
    starts = []
    for i, feed in enumerate(feeds):
        past = _past(feed)[0]
        before = feeds[i - 1] if i else None
        grown = before is not None and feed[past].shape[2] == before[past].shape[2] + before["input_ids"].shape[1]
        if not grown:
            starts.append(feed)
    return starts


def decode(path: Path, feeds: list[dict], steps: int = STEPS) -> np.ndarray:
    """Greedy tokens [chains, B, steps] of the model at `path` from each chain's first sample."""
    import onnxruntime as ort

    from onnxsurgery.running.kv_cache import present_names

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    out = []
    for feed in chain_starts(feeds):
        feed, tokens = dict(feed), []
        for _ in range(steps):
            got = dict(zip(names, s.run(None, feed)))
            token = np.asarray(got[names[0]])[:, -1].argmax(-1).astype(np.int64)[:, None]
            tokens.append(token[:, 0])
            feed["input_ids"] = token
            for past in _past(feed):
                feed[past] = next(got[n] for n in present_names(past) if n in got)
        out.append(np.stack(tokens, axis=1))
    return np.stack(out)
