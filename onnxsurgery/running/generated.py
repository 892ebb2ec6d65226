"""Generated samples that a session runs (feeds.py makes them): the lengths tried in turn
(`runnable_inputs`), and a decoder's: its first step, its past replaced by the one it computes
itself (`with_own_past`)."""

from __future__ import annotations

import os

import numpy as np
import onnx

from .feeds import DEFAULT_BATCH, DEFAULT_DIM, LENGTHS, make_inputs
from .kv_cache import is_cache_input, present_names


def runnable_inputs(sess, run, *, shapes: dict[str, list[int]] | None = None, seed: int = 0,
                    model: onnx.ModelProto | str | os.PathLike | None = None):
    """(sample, run(sample), length, None) for the first of LENGTHS whose generated sample (with
    a decoder's own past, `with_own_past`) `run` takes, then the first length with free integer
    inputs at 0 (module doc); (the first sample, None, length, the exception it raised) where
    none is taken. A sample that changes no input is not tried again. A sample on which a float
    output holds no number at all verifies nothing there (NaN against NaN compares as equal):
    the next is tried, and it is kept only where no other gives numbers."""
    first, hollow, tried = None, None, []
    for length, free in [(n, 10) for n in LENGTHS] + [(LENGTHS[0], 1)]:
        sample = with_own_past(sess, make_inputs(sess, shapes=shapes, seed=seed, model=model, length=length,
                                                 free_integers=free),
                               shapes=shapes, seed=seed + 3, model=model, length=length)
        if any(_same(sample, other) for other in tried):
            continue
        tried.append(sample)
        try:
            outputs = run(sample)
        except Exception as e:  # noqa: BLE001 - onnxruntime's own types, or the caller's wrapping
            first = first or (sample, None, LENGTHS[0], e)
            continue
        if not _without_numbers(outputs):
            return sample, outputs, length, None
        hollow = hollow or (sample, outputs, length, None)
    return hollow or first


def _without_numbers(outputs) -> bool:
    """Whether a float output of a run (a list of arrays) has values but none finite."""
    arrays = [np.asarray(o) for o in outputs] if isinstance(outputs, (list, tuple)) else []
    return any(a.dtype.kind in "fc" and a.size and not np.isfinite(a).any() for a in arrays)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and np.array_equal(a[k], b[k]) for k in a)


def first_step_inputs(sess, *, shapes: dict[str, list[int]] | None = None, seed: int = 0,
                      model: onnx.ModelProto | str | os.PathLike | None = None,
                      batch: int = DEFAULT_BATCH, length: int = DEFAULT_DIM) -> dict[str, np.ndarray] | None:
    """A decoder's first step: its KV cache inputs empty (past length 0), a `use_cache` flag false
    (a merged decoder's If then runs its branch without a past, which holds its own copy of every
    layer and computes the cross-attention caches). None for a model without a dynamic past
    length, or whose past --shape fixes."""
    fixed = set(shapes or {})
    past = [i for i in sess.get_inputs() if is_cache_input(i.name) and i.name not in fixed
            and any(isinstance(d, str) and "past" in d.lower() for d in i.shape)]
    if not past:
        return None
    return make_inputs(sess, shapes=shapes, seed=seed, model=model, past_length=0, batch=batch, length=length)


def with_own_past(sess, sample: dict[str, np.ndarray], *, shapes: dict[str, list[int]] | None = None, seed: int = 0,
                  model: onnx.ModelProto | str | os.PathLike | None = None,
                  length: int = DEFAULT_DIM) -> dict[str, np.ndarray]:
    """`sample` with its generated KV cache replaced by the one the model computes itself for
    as many generated tokens (a first step, `first_step_inputs`, on the same encoder states),
    wherever a present output has the past input's name and shape. Standard-normal keys and
    values are no cache a model makes, and its error on them is not the error in use:
    SmolLM2-135M int8, logits relative L2 0.26 (optimum export) and 0.14 (genai builder) on a
    random past of 8, 0.014 and 0.026 on its own. Unchanged where the model gives none."""
    return with_own_pasts(sess, [sample], seeds=[seed], shapes=shapes, model=model, length=length)[0]


def with_own_pasts(sess, samples: list[dict[str, np.ndarray]], *, seeds: list[int],
                   shapes: dict[str, list[int]] | None = None,
                   model: onnx.ModelProto | str | os.PathLike | None = None,
                   length: int = DEFAULT_DIM, merge: bool = False, steps: list | None = None,
                   ) -> list[dict[str, np.ndarray]]:
    """`with_own_past` of each sample (its prefix from its own seed); with `merge`, the prefixes
    that differ only in their batch run as one batch (batched.py: a streamed decoder reads
    every weight once for them all, not once per sample: dec-l4's two took 1.1-1.3 s each).
    `steps`: given a list, filled with (prefixes, their outputs) where every sample's prefix ran
    as one batch: each prefix is a first step (`first_step_inputs`) whose outputs are computed
    already (reference_runs: the first-step samples of a streamed decoder)."""
    from .batched import run_samples

    names = [o.name for o in sess.get_outputs()]
    prefixes = [_own_past_prefix(sess, sample, shapes=shapes, seed=seed, model=model, length=length)
                for sample, seed in zip(samples, seeds)]
    wanted = [i for i, p in enumerate(prefixes) if p is not None]
    try:
        outs = run_samples([prefixes[i] for i in wanted], lambda feeds: sess.run(names, feeds), merge=merge)
        if steps is not None and merge and wanted and len(wanted) == len(samples):
            steps.append(([prefixes[i] for i in wanted], outs))
    except Exception:  # noqa: BLE001 - onnxruntime's own types: each on its own, its random past kept if refused
        outs = [_run_or_none(sess, names, prefixes[i]) for i in wanted] if merge and len(wanted) > 1 else []
    own = list(samples)
    for i, out in zip(wanted, outs):
        if out is None:
            continue
        computed = dict(zip(names, out))
        own[i] = dict(samples[i])
        for name in [n for n in samples[i] if "past" in n.lower() and is_cache_input(n)]:
            for source in present_names(name):
                if (source in computed and computed[source].shape == samples[i][name].shape
                        and computed[source].dtype == samples[i][name].dtype):
                    own[i][name] = computed[source]
                    break
    return own


def _run_or_none(sess, names: list[str], feeds: dict[str, np.ndarray]):
    try:
        return sess.run(names, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime's own types
        return None


def _own_past_prefix(sess, sample: dict[str, np.ndarray], *, shapes, seed: int, model, length: int):
    """The first step whose present outputs are `sample`'s own past (with_own_past), or None."""
    ids = next((i.name for i in sess.get_inputs() if "input_ids" in i.name.lower() and i.name in sample), None)
    declared = {i.name: i.shape for i in sess.get_inputs()}
    caches = [name for name in sample if "past" in name.lower() and is_cache_input(name)]
    lengths = set()  # of the past, from the axes named so (a cross-attention cache's is the encoder's)
    for name in caches:
        lengths.update(sample[name].shape[a] for a, d in enumerate(declared.get(name, []))
                       if isinstance(d, str) and "past" in d.lower() and a < sample[name].ndim)
    if ids is None or len(lengths) != 1 or not min(lengths):
        return None
    fixed = {**(shapes or {}), ids: [sample[ids].shape[0], lengths.pop()]}
    prefix = first_step_inputs(sess, shapes=fixed, seed=seed, model=model, length=length)
    if prefix is None:
        return None
    for name, value in prefix.items():  # the same encoder states, where the model takes some
        if (not is_cache_input(name) and name in sample and sample[name].shape == value.shape
                and value.dtype.kind == "f"):
            prefix[name] = sample[name]
    return prefix
