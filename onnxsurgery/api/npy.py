"""`npy`, `embed` and `run`: constants out to .npy files and back, and running a model whose
constants are out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ..errors import InputError, runtime_message
from ..kept_order import keep_input_order
from ..storage.held_lists import held
from ..storage.staging import copy_file, data_files_of, save_model
from ..storage.npy import (DEFAULT_MIN_BYTES, default_npy_dir, load_feeds, manifest_path, read_manifest, write_arrays,
                   write_manifest)
from ..passes.embed import EmbedInputs
from ..passes.externalize import externalize
from ..pipeline import open_workspace, shrink_pipeline
from ..report import RunReport
from ..running.generated import runnable_inputs
from ..running.samples import check_samples
from ..running.sessions import load_error, session
from ..run_options import NpyRun, Output, grouped
from ._common import model_file, os_errors, output_for


@os_errors
def npy_file(input_path: str | os.PathLike, output_path: str | os.PathLike, *, run: NpyRun | None = None,
             **options) -> RunReport:
    """Move constants out of the model into .npy files (see `onnxsurgery.storage.npy`), leaving graph
    inputs of the same names; or, with `external_data`, write a standard .onnx + .data pair.
    The options (run_options.NpyRun, or its fields as keywords; the output group whole or
    field by field: `in_place`, `external_data`): identical constants are merged first (`merge`,
    `min_elements`), so each distinct tensor is written once. Which move: those of at least
    `min_bytes`, feeding nodes named like `names` or of types `ops` (their union); with none of
    these, every constant of at least 1 KB (npy.DEFAULT_MIN_BYTES); with `shared`, only the
    constants read more than once after merging (scs4onnx's npy mode). `npy_dir`: where the
    .npy files go (None: beside the output)."""
    run = NpyRun.given(run, options)
    npy_dir, names, ops, shared, output = run.npy_dir, run.names, run.ops, run.shared, run.output
    min_bytes = run.min_bytes
    if not shared and min_bytes is None and not names and not ops:
        min_bytes = DEFAULT_MIN_BYTES
    external_data = bool(output.external_data)
    out = output_for(input_path, output_path, output.in_place)
    why = load_error(input_path)  # before the workspace holds the graph: the session's memory comes first
    ws = open_workspace(input_path)
    report = RunReport("npy", str(input_path), output=str(out), bytes_before=ws.input_bytes)
    if why is not None:
        report.notes.append(f"onnxruntime cannot load {input_path}, so `run` will not run the result either: {why}")
    if run.merge:
        ws.run_pipeline(shrink_pipeline(min_elements=run.min_elements))  # each distinct tensor once
    if external_data:
        with held(ws.graph) as lists:  # a tree ensemble's tables written from the input's protos, not copied
            exported = keep_input_order(ws.finish(), ws.template)
        written = save_model(exported, out, external_data=True, files=ws.files, lists=lists)
        report.passes = ws.reports
        report.bytes_after = sum(p.stat().st_size for p in written)
        report.notes.append(f"tensors of 1 KB or more are in {written[0].name}")
        return report
    ws.cleanup()  # constants merged away must not be selected
    moved_report, arrays = externalize(ws.graph, min_bytes=min_bytes, node_names=names, op_types=ops,
                                       overridable=ws.overridable)
    ws.reports.append(moved_report)
    report.passes = ws.reports
    npy_dir = Path(npy_dir) if npy_dir is not None else default_npy_dir(out)
    # before anything is written: a failure here leaves nothing behind. A tree ensemble's tables
    # (luscinia: 1.2 GB parsed) are written from the input's protos, not from an export's copy
    with held(ws.graph) as lists:
        exported = keep_input_order(ws.finish(), ws.template)  # the input's order: the same sums (kept_order.py)
    created = not npy_dir.exists()
    manifest = write_arrays(arrays, npy_dir, manifest_path(out))
    try:
        written = save_model(exported, out, files=ws.files, lists=lists)
        write_manifest(manifest, manifest_path(out))
    except BaseException:
        if created:  # a failed run leaves no .npy folder of its own behind
            shutil.rmtree(npy_dir, ignore_errors=True)
        raise
    report.bytes_after = sum(p.stat().st_size for p in written)
    if not moved_report.changed:
        report.notes.append("moved nothing: " + ("no constant is read more than once (--shared)" if shared else
                            f"no constant of at least {min_bytes} bytes" if min_bytes is not None and not names
                            and not ops else "no constant matches the selection")
                            + "; --min-bytes 0 moves every constant")
    moved_report.details = {"npy_dir": str(npy_dir), "manifest": str(manifest_path(out)),
                            "inputs": list(manifest["inputs"])}
    return report


@os_errors
def embed_file(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    output: Output | None = None,
    **fields,
) -> RunReport:
    """Put the arrays of a model written by `npy_file` back as initializers. The output
    (run_options.Output, or its fields as keywords): `in_place`, `external_data`."""
    output = grouped("embed", fields, output=output)
    external_data = bool(output.external_data)
    out = output_for(input_path, output_path, output.in_place)
    if not Path(input_path).is_file():
        raise InputError(f"input not found: {input_path}")
    if read_manifest(input_path) is None:
        raise InputError(f"no manifest beside {input_path} ({manifest_path(input_path).name}); nothing to embed")
    feeds = load_feeds(input_path)  # empty when npy moved nothing: the output is then a copy
    if not feeds and not external_data and not data_files_of(Path(input_path)):
        # a copy, byte for byte, of what the graph's export wrote again: nothing parsed (a tree
        # ensemble's tables: 1.16 GB parsed, and as much again for the export's copy of them)
        copy_file(input_path, out)
        size = Path(input_path).stat().st_size
        report = RunReport("embed", str(input_path), output=str(out), bytes_before=size, bytes_after=size)
        report.notes.append("nothing to embed (npy moved no array): the output is a copy of the input")
        return report
    ws = open_workspace(input_path)
    report = RunReport("embed", str(input_path), output=str(out), bytes_before=ws.input_bytes)
    ws.run_pipeline([EmbedInputs(feeds)])
    report.passes = ws.reports
    written = save_model(keep_input_order(ws.finish(), ws.template), out, external_data=external_data,
                         files=ws.files)
    report.bytes_after = sum(p.stat().st_size for p in written)
    return report


def run_model(model: str | os.PathLike, feeds: dict[str, np.ndarray] | None = None, *,
              shapes: dict[str, list[int]] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Run a model in onnxruntime. Arrays externalized by `npy_file` go in as the initializers
    they were (not as feeds: sessions._mapped_session says why), so the outputs are bit-identical
    to the original model's on every CPU; other inputs come from `feeds` (which may also
    override an externalized array), or are generated from the declared dtypes and shapes."""
    model_file(model)
    given = dict(feeds or {})
    if given:
        check_samples(model, [given], complete=False)  # the model's inputs include the .npy arrays' names
    constants = {name: array for name, array in load_feeds(model).items() if name not in given}
    sess = session(model, initializers=constants)
    names = [o.name for o in sess.get_outputs()]
    missing = [i for i in sess.get_inputs() if i.name not in given]
    if not missing:
        try:
            values = sess.run(names, given)
        except Exception as e:  # onnxruntime's own exception types
            raise InputError(f"onnxruntime failed to run {model}: {runtime_message(e)}") from e
        return dict(zip(names, values))
    # generated as compare and quant generate them (generated.runnable_inputs): the lengths in turn,
    # until one runs (silero-vad's reflect padding needs more than 32 samples)
    sample, values, _, error = runnable_inputs(sess, lambda feeds: sess.run(names, {**feeds, **given}),
                                               shapes=shapes, seed=seed, model=model)
    if error is not None:
        fixable = ", ".join(f"{i.name}{list(i.shape)}" for i in missing if i.name not in (shapes or {}))
        hint = f"--shape NAME:DxD for {fixable}, or --inputs FILE.npz" if fixable else "--inputs FILE.npz"
        raise InputError(f"onnxruntime failed to run {model} on generated inputs: {runtime_message(error)} "
                         f"(give {hint})")
    return dict(zip(names, values))
