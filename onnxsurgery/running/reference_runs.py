"""The reference's runs in a comparison (verify.compare_models): the samples, generated or
given, run in the input model once, and kept for each candidate compared with it (quant: the
opset upgrade, then the result) in the caller's `reference_runs` dict, keyed by the settings they
ran under; started ahead on another thread while quant quantizes (`reference_ahead`, ahead.py),
the runs larger than the first held at a gate until quantized; a streamed model's samples of one
shape run as one batch (batched.py), which the candidate then runs alike.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import VerificationError
from . import runs
from .ahead import Gate, Pending
from .arena import ArenaSession, arena_verdict, for_generated, owned
from .batch_budget import extra_samples_fit
from .batched import batch_dimension, batch_groups, run_samples
from .chained import chained_runs
from .feeds import DEFAULT_BATCH, LENGTHS, has_dynamic_batch, make_inputs
from .generated import first_step_inputs, runnable_inputs, with_own_past, with_own_pasts
from .kv_cache import is_cache_input
from .samples import check_samples
from .stream_size import streams
from .twinned import twinned_outputs

# A streamed decoder's generated samples (_merged_first): 4 new tokens on a past of 4, at batch 1
# and 2, each past computed by a first step of 4 tokens (the first-step samples): 24 tokens a
# model, where 32 new tokens on a past of 8 made 120 (dec-l4, 337M parameters: each token ~0.7
# GFLOP per model). Every output is still compared at each kind of step (first step, with a
# past; batch 1 and 2); a model without a past keeps LENGTHS[0] (and a past of PAST_LENGTH).
DECODER_LENGTH = 4
DECODER_PAST = 4


def reference_ahead(reference: str | os.PathLike, reference_runs: dict, *,
                    samples: list[dict[str, np.ndarray]] | None = None, shapes: dict[str, list[int]] | None = None,
                    seed: int = 0) -> Pending:
    """The reference's runs that `compare_models(reference, candidate, reference_runs=...)` will
    ask for, started now on another thread (ahead.py) and kept in `reference_runs`: quant starts
    them before it quantizes. Keyed as compare_models keys them for a candidate that is another
    file and streams as the reference does; a comparison under other settings waits for them,
    drops them and runs its own. The caller `wait`s on the result where it never compares.

    Runs larger than the first (the batch-2 sample: twice its memory) wait until the caller
    calls `go_on` (quant: once quantized) or asks for the result (ahead.py); a decoder's first
    step, no past and smaller, does not (dec-l4: held, it ran 1.0 s after quantizing)."""
    streamed = streams(reference)
    layout = samples is not None
    key = runs_key(reference, streamed, seed, shapes, samples, False, True, layout)
    import onnxruntime as ort

    stop = ort.RunOptions()  # its terminate flag ends the run under way and refuses the next ones
    gate = Gate()  # runs larger than the first wait there until the model is quantized (ahead.py)
    pending = Pending(lambda: run_reference(reference, samples, shapes, seed, streamed, layout=layout, beside=stop,
                                              hold=gate.passing, wants_wider=lambda: _verdict(gate),
                                              arena=_ahead_arena(reference, samples, shapes, streamed)),
                      cancel=lambda: setattr(stop, "terminate", True), gate=gate)
    reference_runs.clear()  # one reference at a time
    reference_runs[key] = pending
    return pending


def _ahead_arena(reference, samples, shapes, streamed: bool) -> bool:
    """The arena for the reference's runs ahead, as verification's result takes it (verify.py,
    arena.py): the user's samples where their shapes say it pays; generated ones where the model's
    fixed shapes show runs that map gigabytes of buffers afresh without it (czann_nucleus_det's
    tiles). A verdict a first run would make stays with verification's sessions."""
    if streamed:
        return False
    return arena_verdict(reference, samples).on is True if samples is not None else for_generated(reference, shapes)


def _verdict(gate: Gate) -> bool:
    """Whether the batch-2 sample is wanted, once that is known: a small model's gate opens
    before quantizing (quant's AHEAD_ALL_BYTES), and its batch-2 run waits there for the
    quantized graph's answer (readers.py), which leaves it out of most results (eeg_spindles,
    tumor_vgg16: a third of the reference's runs, beside the quantizer, for nothing)."""
    gate.decided.wait()
    return gate.wider


def runs_key(reference, streamed: bool, seed: int, shapes, samples, same: bool, optimize: bool,
              layout: bool) -> tuple:
    """What names the reference's runs in `reference_runs`: the settings they were computed with."""
    return (identity(reference), streamed, seed, repr(shapes), None if samples is None else id(samples), same,
            optimize, layout)


def settle(reference_runs: dict, key: tuple) -> None:
    """The runs started ahead in `reference_runs`, waited for: kept where they ran, dropped where
    they failed, their error raised where they are the ones asked for (`key`)."""
    for held, value in list(reference_runs.items()):
        if isinstance(value, Pending):
            try:
                reference_runs[held] = value.result()
            except Exception:
                del reference_runs[held]
                if held == key:
                    raise


def identity(model) -> object:
    """What names a model for `reference_runs`: its resolved path, or the object itself."""
    if isinstance(model, (str, os.PathLike)):
        try:
            return str(Path(model).resolve())
        except OSError:
            return str(model)
    return id(model)


def run_reference(reference, samples, shapes, seed: int, streamed: bool, *, wider: bool = True,
                    layout: bool = False, optimize: bool = True, beside=None, hold=None, wants_wider=None,
                    arena: bool = False):
    """(output names, samples, the reference's outputs on each, whether samples of one shape ran
    as one batch): `samples`, or generated ones (one that runs, then with `wider` a batch of 2
    where the batch is dynamic and a decoder's first step). A streamed model's samples that
    differ only in their batch run as one batch (batched.py); the candidate must run them so.
    `beside` (onnxruntime RunOptions, each run's): run beside the quantizer, stopped by them
    (reference_ahead; sessions.session_settings). `hold`: called before each run with larger inputs
    than the first's (the batch-2 sample, not a first step): reference_ahead's gate. `arena`: the
    sessions with onnxruntime's memory arena (arena.py). The batch-2 sample, and a batch of 3, only
    where their extra activations fit the room docs/memory.md's bound leaves (batch_budget.py)."""
    generated = samples is None
    if not generated:
        check_samples(reference, samples)
    ref_sess = runs.open_session(reference, map_weights=True, streamed=streamed, layout=layout, optimize=optimize,
                                 beside=beside is not None, arena=arena)
    # outputs kept from the arena's buffers hold its regions: copied (arena.owned)
    pinning = isinstance(ref_sess, ArenaSession)
    if beside is not None:
        ref_sess = _WithRunOptions(ref_sess, beside)
    names = [o.name for o in ref_sess.get_outputs()]
    merge = streamed and batch_dimension(ref_sess) is not None
    first = None  # the bytes of the first inputs that ran

    def run(feeds):
        nonlocal first
        size = sum(np.asarray(v).nbytes for v in feeds.values())
        if first is not None and size > first and hold is not None:
            hold()  # a larger run than the first: it may hold more than the quantizer leaves spare
        outputs = runs.run(ref_sess, names, feeds)
        outputs = owned(outputs) if pinning else outputs
        first = size if first is None else first
        return outputs

    def open_twins(copies: int, chain=None):  # batches of other shapes in one run (twinned.py, chained.py)
        twins = runs.open_session(reference, map_weights=True, streamed=streamed, layout=layout, optimize=optimize,
                                  beside=beside is not None, twins=copies, chain=chain, arena=arena)
        return twins if beside is None else _WithRunOptions(twins, beside)

    length = LENGTHS[0]
    merged = _merged_first(ref_sess, run, shapes, seed, reference, _decoder_length(ref_sess, shapes),
                           open_twins=open_twins) if generated and wider and merge else None
    if merged is not None:  # the first sample ran, inside the batch of 3 the candidate runs too
        samples, expected, steps = merged
        if steps:  # the prefixes are the first steps, their outputs computed (_merged_first)
            samples.extend(steps[0][0])
            expected.extend(steps[0][1])
            return names, samples, expected, merge, 1
        step = first_step(ref_sess, names, run=run, batches=(DEFAULT_BATCH,), shapes=shapes, seed=seed + 2,
                          model=reference, length=length)
        if step is not None:
            samples.append(step[0])
            expected.append(step[1])
        return names, samples, expected, merge, 1
    if generated:
        sample, computed, length, error = runnable_inputs(ref_sess, run, shapes=shapes, seed=seed, model=reference)
        if error is not None:
            made = ", ".join(f"{k}:{'x'.join(map(str, v.shape)) or 'scalar'}" for k, v in sample.items())
            raise VerificationError(f"the original model does not run on generated inputs ({made}): give real "
                                    f"ones with --inputs, or dimensions with --shape NAME:DxD ({error})") from error
        samples, expected = [sample], [computed]
    else:
        # a streamed model's batches of other shapes: one run of a twinned session, every weight read
        # once, as the candidate runs them (verify.py); all at once, so held as any larger run is
        many = merge and len(batch_groups(samples)) > 1
        if many and hold is not None:
            hold()
        expected = twinned_outputs(open_twins, runs.run, names, samples) if many else None
        if expected is None:
            expected = run_samples(samples, run, merge=merge)
    wider_refused, wider_at = False, None
    if not (generated and wider):
        return names, samples, expected, merge, None
    if has_dynamic_batch(ref_sess, shapes):
        # batch 2 as well: a rewrite can break what only another batch size exercises (an opset
        # upgrade that fixed a Reshape to batch 1 moved MiniLM's batch-4 outputs by 8.4%)
        if hold is not None:
            hold()  # with_own_past runs a batch-2 prefix of its own
        if wants_wider is not None and not wants_wider():  # only weights changed (readers.py)
            return _without_wider(ref_sess, names, samples, expected, merge, run=run, shapes=shapes, seed=seed + 2,
                                  model=reference, length=length)
    if has_dynamic_batch(ref_sess, shapes) and extra_samples_fit(reference, samples[0], 1):
        # (a second sample's activations past the room docs/memory.md's bound leaves: not run, batch_budget.py)
        batch2 = with_own_past(ref_sess, make_inputs(ref_sess, shapes=shapes, seed=seed + 1, model=reference,
                                                    batch=2, length=length),
                              shapes=shapes, seed=seed + 4, model=reference, length=length)
        try:
            if merge and extra_samples_fit(reference, samples[0], 2):
                # streamed: with the first sample as one batch of 3, which the candidate runs once
                try:
                    expected = run_samples([*samples, batch2], run, merge=True)
                except VerificationError:  # a batch of 3 refused: each on its own, on both sides
                    merge = False
                    expected.append(run(batch2))
            else:  # (a streamed batch of 3 past that room: each on its own, on both sides, batch_budget.py)
                merge = False
                expected.append(run(batch2))
            samples.append(batch2)
            wider_at = len(samples) - 1
        except VerificationError:  # batch 1 only, whatever it declares, or only with a past (below)
            wider_refused = True
    # the samples above have a past; the first step has none (prompt processing; a merged
    # decoder's other If branch, which they never run). At batch 2 where the batch-2 sample with
    # a past was refused: GroupQueryAttention takes batch 1 only with a past ("batch_size must
    # be 1 when sequence_length > 1 and past context is given"), any batch without one.
    step = first_step(ref_sess, names, run=run, batches=(2, DEFAULT_BATCH) if wider_refused else (DEFAULT_BATCH,),
                       shapes=shapes, seed=seed + 2, model=reference, length=length)
    if step is not None:
        samples.append(step[0])
        expected.append(step[1])
    return names, samples, expected, merge, wider_at


def _without_wider(sess, names, samples, expected, merge, **options):
    """run_reference' result where its batch-2 sample is left out on request: -1 says so."""
    step = first_step(sess, names, batches=(DEFAULT_BATCH,), **options)
    if step is not None:
        samples.append(step[0])
        expected.append(step[1])
    return names, samples, expected, merge, -1


class _WithRunOptions:
    """A session whose runs all take `options` (reference_ahead: their terminate flag)."""

    def __init__(self, sess, options):
        self._sess, self._options = sess, options  # an arena.ArenaSession adds its shrink to them

    def run(self, names, feeds):
        return self._sess.run(names, feeds, self._options)

    def __getattr__(self, name):
        return getattr(self._sess, name)


def _decoder_length(sess, shapes) -> int:
    """The new tokens of a streamed model's generated samples: DECODER_LENGTH for a decoder fed
    its own past (a dynamic past length, as first_step_inputs asks), LENGTHS[0] otherwise."""
    fixed = set(shapes or {})
    past = any(is_cache_input(i.name) and i.name not in fixed
               and any(isinstance(d, str) and "past" in d.lower() for d in i.shape) for i in sess.get_inputs())
    return DECODER_LENGTH if past else LENGTHS[0]


def _merged_first(sess, run, shapes, seed: int, model, length: int = LENGTHS[0], open_twins=None):
    """([the first sample, the batch-2 sample], their outputs, [(their prefixes, the prefixes'
    outputs)] or []) from one run of both as a batch of 3, or None (no dynamic batch, or that run
    refused: run_reference then asks as before). The samples are those run_reference makes, at
    `length` new tokens (a decoder's: DECODER_LENGTH), and the batch of 3 is what it runs once
    the first sample has run alone; that run of the first sample only showed it runs, which the
    batch shows too: a streamed decoder's reference ran 5 times, now 4 (dec-l4, 1.35 GB: each run reads every weight).

    A decoder's prefixes (the first steps that computed the samples' pasts, at the past's
    length, one batch of 3) are its first-step samples: the reference's first step at the
    first length was a third run of its own, and the result's a second streamed run beside the
    samples' (each dequantizing every weight); then the reference ran twice, and now once where
    `open_twins` (a twinned session of the reference: run_reference's) chains the prefixes and
    the samples in one run (chained.py)."""
    if not has_dynamic_batch(sess, shapes):
        return None
    past = {"past_length": DECODER_PAST} if length == DECODER_LENGTH else {}
    made = [make_inputs(sess, shapes=shapes, seed=seed + extra, model=model, length=length,
                        **({"batch": 2} if extra else {}), **past) for extra in (0, 1)]
    if not extra_samples_fit(model, made[0], 2):  # a batch of 3 past the bound's room (batch_budget.py)
        return None
    chained = None if open_twins is None else chained_runs(
        sess, made, [seed + 3, seed + 4], open_twins=open_twins, run=runs.run, shapes=shapes, model=model,
        length=length)
    if chained is not None:  # the prefixes and the samples in one run of the reference (chained.py)
        return chained
    # their own pasts from one run of both prefixes, as one batch (generated.with_own_pasts)
    made = with_own_pasts(sess, made, seeds=[seed + 3, seed + 4], shapes=shapes, model=model, length=length,
                          merge=True, steps=(steps := []))
    try:
        return made, run_samples(made, run, merge=True), steps
    except VerificationError:
        return None


def first_step(sess, names: list[str], *, batches: tuple[int, ...], run=None, **options):
    """(feeds, outputs) of a decoder's first step (`first_step_inputs`) that `sess` runs, at the
    first of `batches` it takes; None for a model without a past, or refusing an empty one. `run`:
    how the reference runs it (run_reference: held until quantized)."""
    for batch in batches:
        feeds = first_step_inputs(sess, batch=batch, **options)
        if feeds is None:
            return None
        try:
            return feeds, runs.run(sess, names, feeds) if run is None else run(feeds)
        except VerificationError:
            continue
    return None
