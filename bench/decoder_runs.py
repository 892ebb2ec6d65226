"""Running an exported decoder for bench/decoder.py: prefill and one-token steps whatever its cache
inputs are named, the float model's greedy reference, teacher-forced logits, and decode latency
with the decoders' steps interleaved."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

THREADS = 2


def make_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = THREADS, 1, 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class Decoder:
    """Prefill / one-token steps on an exported decoder, whatever its cache input names."""
    _NP = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
           "tensor(float16)": np.float16}

    def __init__(self, path: Path, kv_heads: int, head_dim: int):
        self.sess = make_session(path)
        self.inputs = {i.name: i for i in self.sess.get_inputs()}
        self.outputs = [o.name for o in self.sess.get_outputs()]
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.past_names = [n for n in self.inputs if n.startswith("past_key_values")]

    def _dtype(self, name):
        return self._NP[self.inputs[name].type]

    def feeds(self, ids: list[int], past: dict | None, past_len: int) -> dict:
        n = len(ids)
        f = {"input_ids": np.array([ids], dtype=self._dtype("input_ids"))}
        if "attention_mask" in self.inputs:
            f["attention_mask"] = np.ones((1, past_len + n), dtype=self._dtype("attention_mask"))
        if "position_ids" in self.inputs:
            f["position_ids"] = np.arange(past_len, past_len + n, dtype=self._dtype("position_ids"))[None]
        for name in self.past_names:
            f[name] = past[name] if past else np.zeros((1, self.kv_heads, 0, self.head_dim), self._dtype(name))
        return f

    def run(self, ids: list[int], past: dict | None, past_len: int):
        out = self.sess.run(None, self.feeds(ids, past, past_len))
        d = dict(zip(self.outputs, out))
        new_past = {n: d[n.replace("past_key_values", "present")] for n in self.past_names}
        return d["logits"][0, -1].astype(np.float32), new_past


def reference(dec: Decoder, prompts: list[list[int]], steps: int):
    """Float model: greedy tokens and the last-position logits at prefill and each step."""
    ref = []
    for ids in prompts:
        logits, past = dec.run(ids, None, 0)
        seq, pos = [logits], len(ids)
        toks = []
        for _ in range(steps):
            tok = int(np.argmax(logits))
            toks.append(tok)
            logits, past = dec.run([tok], past, pos)
            pos += 1
            seq.append(logits)
        ref.append((toks, np.stack(seq)))
    return ref


def teacher_forced(dec: Decoder, prompts: list[list[int]], ref) -> np.ndarray:
    outs = []
    for ids, (toks, _) in zip(prompts, ref):
        logits, past = dec.run(ids, None, 0)
        seq, pos = [logits], len(ids)
        for tok in toks:
            logits, past = dec.run([tok], past, pos)
            pos += 1
            seq.append(logits)
        outs.append(np.stack(seq))
    return np.stack(outs)


def decode_latency(decs: list[Decoder], long_prompt: list[int], n: int = 20, warm: int = 3) -> list[float]:
    """Median ms per decode step for each decoder, their steps interleaved (a step of each in
    turn), so that other load on the machine falls on all of them alike."""
    state = []
    for dec in decs:
        logits, past = dec.run(long_prompt, None, 0)
        state.append([logits, past, len(long_prompt)])
    times = [[] for _ in decs]
    for _ in range(n + warm):
        for dec, st, ts in zip(decs, state, times):
            feeds = dec.feeds([int(np.argmax(st[0]))], st[1], st[2])
            t = time.perf_counter()
            out = dec.sess.run(None, feeds)
            ts.append(time.perf_counter() - t)
            d = dict(zip(dec.outputs, out))
            st[0] = d["logits"][0, -1]
            st[1] = {k: d[k.replace("past_key_values", "present")] for k in dec.past_names}
            st[2] += 1
    return [statistics.median(ts[warm:]) * 1000 for ts in times]
