"""Samples that differ only in their batch run as one batch, where a streamed session would
otherwise read every weight once per sample.

A streamed session (sessions.py) maps its weights from the file and, for a quantized one,
dequantizes each at every run: a model past the page cache reads its whole file from disk per
run, so verifying eight sentences of a 27 GB decoder read 8 x 27 GB per model. Samples whose
inputs agree in names, dtypes and every axis but the first are concatenated on that axis, run
once, and each sample's outputs cut back out. Only where the model says the first axis is the
batch: every input's and every output's first axis is one and the same named dimension (a
model whose outputs pool over the batch, or whose first axis is something else, is run sample
by sample, as before). Both sides of a comparison run alike, so that a lossless rewrite still
computes bit-identical outputs (a batch of 3 need not round as three batches of 1 do).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .heap import give_back_freed_memory

Run = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def batch_dimension(sess) -> str | None:
    """The name of the dimension that is the first axis of every input and every output of
    `sess`, or None where there is no such single name."""
    axes = [(io.shape or [None])[0] for io in (*sess.get_inputs(), *sess.get_outputs())]
    first = axes[0] if axes else None
    if not isinstance(first, str) or not first or first.startswith("unk__"):  # onnxruntime's made-up names
        return None
    return first if all(a == first for a in axes) else None


def _signature(feeds: dict[str, np.ndarray]) -> tuple | None:
    if any(v.ndim == 0 or v.shape[0] == 0 for v in feeds.values()):
        return None  # a scalar, or an empty batch: nothing to concatenate on
    return tuple(sorted((name, v.dtype.str, v.shape[1:]) for name, v in feeds.items()))


def batch_groups(samples: list[dict[str, np.ndarray]]) -> list[list[int]]:
    """The samples' indices, those that run as one batch together (`run_samples` with `merge`)."""
    found: dict[tuple | int, list[int]] = {}
    for index, feeds in enumerate(samples):
        signature = _signature(feeds)
        found.setdefault(index if signature is None else signature, []).append(index)
    return list(found.values())


def run_samples(samples: list[dict[str, np.ndarray]], run: Run, *, merge: bool,
                side_by_side: bool = False, together=None) -> list[list[np.ndarray]]:
    """Each sample's outputs (`run(feeds)` gives one run's), in the samples' order. With `merge`
    (the caller's decision, from the reference's `batch_dimension`: both sides of a comparison
    must decide alike), the samples of one signature run as one batch. `side_by_side`: two such
    batches run at once, on two threads (a streamed result: each run dequantizes every weight on
    one core, onnxruntime's Cast being single-threaded; the two runs hold one dequantized weight
    each, where one run held one). `together`: given every batch's feeds, their outputs from one
    run (twinned.py: each weight dequantized once for all of them)."""
    if not merge or len(samples) < 2:
        return _one_by_one(samples, run)
    members_of = batch_groups(samples)
    results: list[list[np.ndarray] | None] = [None] * len(samples)
    if together is not None and len(members_of) > 1:
        joined = [_joined(samples, members) for members in members_of]
        for members, outputs in zip(members_of, together(joined)):
            _cut(samples, members, outputs, run, results)
        return results  # type: ignore[return-value]
    if side_by_side and len(members_of) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="onnxsurgery-batch") as pool:
            for members, outputs in zip(members_of, list(pool.map(
                    lambda members: run_samples([samples[i] for i in members], run, merge=True), members_of))):
                for i, out in zip(members, outputs):
                    results[i] = out
        return results  # type: ignore[return-value]
    for members in members_of:
        _cut(samples, members, run(_joined(samples, members)), run, results)
    return results  # type: ignore[return-value]


def _one_by_one(samples, run: Run) -> list[list[np.ndarray]]:
    """Each sample's outputs, run after run; the last run's freed buffers given back to the system
    first (heap.py): glibc reuses a freed 200 MB activation only in part, and the next run's come on
    top (isbnx_det at 1280x1280: `compare` of 4 pages peaked at 421 MB, against 2xx trimmed)."""
    results = []
    for index, feeds in enumerate(samples):
        if index:
            give_back_freed_memory()
        results.append(run(feeds))
    return results


def _joined(samples: list[dict[str, np.ndarray]], members: list[int]) -> dict[str, np.ndarray]:
    if len(members) == 1:
        return samples[members[0]]
    return {name: np.concatenate([samples[i][name] for i in members]) for name in samples[members[0]]}


def _cut(samples, members: list[int], outputs: list[np.ndarray], run: Run, results: list) -> None:
    """Each member's outputs, cut out of their batch's `outputs` into `results`."""
    if len(members) == 1:
        results[members[0]] = outputs
        return
    cut = split_batch(outputs, [next(iter(samples[i].values())).shape[0] for i in members])
    for n, i in enumerate(members):
        results[i] = run(samples[i]) if cut is None else cut[n]  # None: not batched after all


def split_batch(outputs: list[np.ndarray], sizes: list[int]) -> list[list[np.ndarray]] | None:
    """One batch's `outputs` cut into the outputs of samples of `sizes` rows each (views), or None
    where an output is not batched along its first axis."""
    if any(o.ndim == 0 or o.shape[0] != sum(sizes) for o in outputs):
        return None
    bounds = np.cumsum([0, *sizes])
    return [[o[lo:hi] for o in outputs] for lo, hi in zip(bounds[:-1], bounds[1:])]
