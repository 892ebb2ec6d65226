"""`shrink`: merge bit-identical constants, in memory or from a file to a file."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from ..errors import OptionError, VerificationError
from ..storage.staging import copy_file, copy_with_data
from ..report import RunReport
from ..run_options import ShrinkRun
from ..running import heap
from ..running.sessions import load_error
from ._common import in_memory, write_checked, os_errors, output_for

if TYPE_CHECKING:
    from ..pipeline import Workspace

log = logging.getLogger("onnxsurgery")


def _run_shrink_passes(ws: Workspace, report: RunReport, run: ShrinkRun) -> None:
    from ..pipeline import shrink_pipeline  # the graph's path: not loaded where shrink_direct.py's is taken

    ws.run_pipeline(shrink_pipeline(**run.passes, opsets=ws.opsets, store=ws.store))
    report.passes = ws.reports


def shrink(model, *, run: ShrinkRun | None = None, **options) -> tuple[onnx.ModelProto, RunReport]:
    """Replace constants read only by Shape with their shape, merge bit-identical constants (all
    scopes), optionally (`reshaped`) those equal under another shape through a Reshape,
    optionally transposed copies, optionally narrow int64/float64 where safe, and (`half`) store
    float32 constants that float16 or bfloat16 holds exactly in 2 bytes with a Cast after.
    Lossless: the result computes exactly what `model` does. The options are `shrink_file`'s
    (a ShrinkRun, or its fields as keywords: `min_elements`, `transposed`, `narrow`, `half`,
    `reshaped`), but for verification, target and output, which need files.

    A gs.Graph is rewritten in place (and also exported). The result is never larger than the
    input: if it would be, the input is returned unchanged.
    """
    run = ShrinkRun.given(run, options)
    if run != ShrinkRun(**run.passes):
        raise OptionError("shrink in memory takes min_elements, transposed, narrow, half and reshaped; "
                          "verification, target and output are shrink_file's")
    result, report, ws = in_memory(model, "shrink", lambda ws, report: _run_shrink_passes(ws, report, run))
    if ws.template is not None and report.bytes_after > report.bytes_before:
        report.notes.append("the rewritten model was larger than the input; input kept as it is")
        result, report.bytes_after = ws.materialized(ws.template), report.bytes_before
    elif ws.template is None:
        report.bytes_before = report.bytes_after + sum(p.bytes_saved for p in report.passes)
    return result, report


@os_errors
def shrink_file(input_path: str | os.PathLike, output_path: str | os.PathLike, *, run: ShrinkRun | None = None,
                **options) -> RunReport:
    """`shrink` from a file to a file, written atomically. The options (run_options.ShrinkRun, or
    its fields as keywords; the inputs and output groups given whole or field by field) are
    `shrink`'s, and: `target` "tensorrt": the result is checked as `check` does, and a note says
    what merging means there (targets/tensorrt.py). The output (run_options.Output):
    `in_place`; `external_data` None: a data file where the input has one (True: always; False:
    one file, below the 2 GB protobuf limit).

    With `verify`, input and result run in onnxruntime on the inputs (run_options.Inputs:
    `samples`, or generated inputs with `shapes` fixing their dimensions) first, and nothing
    is written unless every output is bit-identical (nor when onnxruntime cannot load the
    input). Without it, a model onnxruntime cannot load is still shrunk (the rewrite is lossless
    by construction) with a note saying why it was not checked. When the rewrite would not make
    the file smaller, the output is a byte-for-byte copy of the input (run in onnxruntime too,
    with `verify`).
    """
    run = ShrinkRun.given(run, options)
    out = output_for(input_path, output_path, run.output.in_place)
    ws, opened = _open(input_path, run)
    # whether onnxruntime loads the input, asked on a second core while the passes run on this
    # one: its weights stay in the file (sessions.load_error), as the workspace's do. The thread
    # allocates from the main heap (heap.one_heap, as verification's reference thread does): on a
    # heap of its own, glibc grew it a page at a time for the session's parse (2,700 mprotect
    # calls on the ALBERT sample)
    heap.one_heap()
    direct = ws is None
    if direct:  # its merge before the check starts, its write beside it (the check holds the GIL)
        ws, direct = _direct_or_graph(opened)
    # its proto is the workspace's now, released with it (ws.close) before verification's sessions:
    # luscinia's tree tables, 1.16 GB parsed, stayed under both sessions
    opened = None
    with ThreadPoolExecutor(1) as helper:
        loads = None if run.verify else helper.submit(load_error, input_path)
        report = RunReport("shrink", str(input_path), output=str(out), bytes_before=ws.input_bytes)
        if ws.files is not None:
            ws.files.spill_into(out.parent)  # 2-byte copies wait in a file beside the output, not in memory
        if direct:  # shrunk on its proto (shrink_direct.py)
            report.passes = ws.reports
        else:
            _run_shrink_passes(ws, report, run)
        if not direct:  # time9: the graph's path waits for the check before it writes (dec-l4 1.12x otherwise)
            _note_load(report, loads, input_path)
            loads = None
        report = _write_result(ws, report, run, input_path, out, loads)
    _note_crash(report, input_path, out)
    return report


def _note_load(report: RunReport, loads, input_path) -> None:
    """The load check's answer, waited for: a note where onnxruntime cannot load the input."""
    why = None if loads is None else loads.result()
    if why is not None:
        report.notes.insert(0, f"not checked in onnxruntime, which cannot load {input_path}: {why}")


def _note_crash(report: RunReport, input_path, out: Path) -> None:
    """A note where onnxruntime 1.32's default session dies on the written model, as on the input
    (running/default_crash.py: a float16 Transpose [1, 0, 2] before a MatMul of a float16 constant):
    verification's sessions, that transformer off, said "bit-identical" and nothing of it. Read from
    the structures (no payloads, well under a millisecond on the zoo's models)."""
    from ..running.default_crash import kept_crash
    from ..storage.skim import read_structure

    try:
        note = kept_crash(read_structure(out), read_structure(Path(input_path)))
    except (OSError, ValueError):  # written and read already: nothing to say where it cannot be read again
        return
    if note is not None:
        report.notes.append(note)


def _write_result(ws, report: RunReport, run: ShrinkRun, input_path, out: Path, loads) -> RunReport:
    """`shrink_file`'s result written (or the input copied), checked where asked; `loads` (the
    load check, where not waited for yet) waited for before it returns."""
    verify, target = run.verify, run.target
    samples, shapes, external_data = run.inputs.samples, run.inputs.shapes, run.output.external_data
    # unless asked otherwise, weights that came in a data file go out in one, `<output>.data`, as
    # quant writes them: onnxruntime then maps it instead of holding a parsed copy
    external_data = ws.has_external_data_files if external_data is None else external_data
    copy_allowed = not external_data and not ws.has_external_data_files

    def check(written: Path) -> None:
        # imported here: without --verify, shrink never runs the comparison (its modules were
        # a sixth of the imports of a `shrink` of the ALBERT sample, 0.75 s of CPU in all)
        from ..running.verify import compare_models

        try:
            report.verification = compare_models(input_path, written, samples=samples, shapes=shapes)
        except VerificationError as e:
            raise VerificationError(f"{e}; nothing written (without --verify, shrink writes its lossless "
                                    "rewrite unchecked)") from e
        if not report.verification["exact"]:
            raise VerificationError(
                f"shrunk model differs from {input_path} "
                f"(max abs error {report.verification['max_abs_error']:.3g}); nothing written"
            )

    if copy_allowed and not any(p.changed for p in report.passes):
        report.notes.append("nothing to shrink: the output is a copy of the input")
        ws.close()
        if verify:
            check(Path(input_path))  # the copy is the input, byte for byte
        copy_file(input_path, out)
        report.bytes_after = report.bytes_before
        _note_load(report, loads, input_path)
        return report

    if external_data and ws.has_external_data_files and not any(p.changed for p in report.passes):
        # a copy with its data file (staging.copy_with_data), where the model has one
        written = _copied_with_data(ws, input_path, out, check if verify else None)
        if written is not None:
            report.notes.append("nothing to shrink: the output is a copy of the input and its data file")
            report.bytes_after = sum(p.stat().st_size for p in written)
            _note_load(report, loads, input_path)
            return report
    # payloads stay in the input file until written
    written = write_checked(ws, ws.finish, out, external_data, check if verify else None)
    report.bytes_after = sum(p.stat().st_size for p in written)
    if copy_allowed and report.bytes_after > report.bytes_before:
        report.notes.append("the rewritten model was larger than the input; wrote the input as it is")
        copy_file(input_path, out)
        report.bytes_after = report.bytes_before
    if target is not None:
        _for_target(target, out, report)
    _note_load(report, loads, input_path)
    return report


def _open(input_path, run: ShrinkRun):
    """Which way `shrink_file` goes, decided here (and in `_direct_or_graph` for what only the
    payloads tell), and said under -v: (the graph's workspace, None), opened now, or (None, the
    DirectShrink) whose payload checks and merge run beside the load check. The graph's
    workspace opens before the check starts (time9: opening it beside the check's session raised
    ALBERT's peak RSS from 148 to 173-249 MB); the direct path's cheap checks read no payload."""
    asked = [name for name in ("transposed", "narrow", "reshaped") if getattr(run, name)]
    if asked:
        log.info("shrink: the graph's path (%s asked for)", ", ".join(asked))
        return open_workspace(input_path), None
    from .shrink_direct import direct_shrink

    opened = direct_shrink(input_path, min_elements=run.passes["min_elements"], half=run.passes["half"])
    if opened is None:  # tests: the graph's path forced
        return open_workspace(input_path), None
    if not opened.covered:  # DirectShrink logged why
        return opened.graph_workspace(), None
    return None, opened


def _direct_or_graph(opened):
    """(workspace, whether shrunk on its proto): the DirectShrink's result, or the graph's
    workspace where a check on the payloads needs it (shrink_direct.py logs why)."""
    ws = opened.shrink()
    return (ws, True) if ws is not None else (opened.graph_workspace(), False)


def open_workspace(input_path):
    from ..pipeline import open_workspace  # the graph's path: not loaded where shrink_direct.py's is taken

    return open_workspace(input_path)


def _copied_with_data(ws, input_path, out: Path, check) -> list[Path] | None:
    """The input and its one data file copied to `out` (copy_with_data), checked first as the
    input itself where `check` is given: the copy computes what it computes, nodes in the same
    order. None where the input has several data files (then it is written as any result is)."""
    def before() -> None:
        ws.close()
        if check is not None:
            check(Path(input_path))

    return copy_with_data(input_path, out, before=before)


def _for_target(target: str, written: Path, report: RunReport) -> None:
    """`shrink --target tensorrt`: what merging means there, and the check of the result."""
    from ..targets.tensorrt import MERGING_NOTE
    from .check import check_for_tensorrt

    if any(p.name == "merge_duplicates" and p.changed for p in report.passes):
        report.notes.append(MERGING_NOTE)
    check_for_tensorrt(written, report)
