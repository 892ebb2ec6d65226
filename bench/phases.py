"""Where one `onnxsurgery` command's time goes, by phase (issue 58): each onnxruntime session's
creation and each run (on which thread, for what: the capture, a candidate, the confirm, the
reference, the result), the plan, the builds, the writing and verification, with wall time,
the calling thread's CPU and the whole process's CPU over the same interval (onnxruntime's own
threads and any other thread working meanwhile are in the last), and the imports before the
command starts.

    python bench/phases.py quant MODEL.onnx OUT.onnx [--inputs tune.npz ...]

The checkout that runs is the one on PYTHONPATH (`--tree` is not needed: set it). Phases
overlap where work runs on two threads (the reference's runs beside the quantizer, the
data-free plan beside the measured one): read the process CPU of nested rows as an upper bound
of their own. Times on a loaded machine: read the CPU columns, not the walls."""

from __future__ import annotations

import atexit
import functools
import runpy
import sys
import threading
import time

STARTED = time.perf_counter()

# (module, attribute, label): wrapped where the callers look them up
PHASES = [
    ("onnxsurgery.api.quantizing", "prepare", "prepare (plans, candidates)"),
    ("onnxsurgery.api.quantizing", "open_workspace", "open_workspace"),
    ("onnxsurgery.api.quantizing", "at_required_opset", "at_required_opset"),
    ("onnxsurgery.api.quantizing", "write_checked", "write_checked (+check)"),
    ("onnxsurgery.api.quantizing", "compare_models", "compare_models"),
    ("onnxsurgery.api.measured_or_free", "plan_with", "plan_with"),
    ("onnxsurgery.api.measured_or_free", "_build", "candidate build"),
    ("onnxsurgery.api.measured_or_free", "shared_runs", "candidates' shared runs"),
    ("onnxsurgery.api.built", "candidate_runs", "candidate_runs (whole)"),
    ("onnxsurgery.running.heap", "give_back_freed_memory", "malloc_trim"),
]


def _wrap(owner, name: str, label: str, rows: list) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def timed(*args, **kwargs):
        wall, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            rows.append((label, threading.current_thread().name, wall - STARTED, time.perf_counter() - wall,
                         time.thread_time() - cpu, time.process_time() - process))
    setattr(owner, name, timed)


def instrument(rows: list) -> None:
    import importlib

    from onnxruntime.capi import onnxruntime_inference_collection as ort_api

    _wrap(ort_api.InferenceSession, "_create_inference_session", "ort session", rows)
    _wrap(ort_api.Session, "run", "ort run", rows)
    for module, name, label in PHASES:
        owner = importlib.import_module(module)
        if hasattr(owner, name):
            _wrap(owner, name, label, rows)
    # the names verify.py and built.py took at import
    from onnxsurgery.running import heap, verify
    verify._give_back_freed_memory = heap.give_back_freed_memory


def show(rows: list, imported: tuple[float, float], out=sys.stderr) -> None:
    print(f"{'phase':30s} {'thread':18s} {'at':>6s} {'wall':>6s} {'thr cpu':>7s} {'proc cpu':>8s}", file=out)
    print(f"{'imports (before the command)':30s} {'MainThread':18s} {0:6.2f} {imported[0]:6.2f} {'':7s} "
          f"{imported[1]:8.2f}", file=out)
    for label, thread, at, wall, cpu, process in sorted(rows, key=lambda r: r[2]):
        print(f"{label:30s} {thread[:18]:18s} {at:6.2f} {wall:6.2f} {cpu:7.2f} {process:8.2f}", file=out)
    print(f"{'total':30s} {'':18s} {0:6.2f} {time.perf_counter() - STARTED:6.2f} {'':7s} "
          f"{time.process_time():8.2f}", file=out)


def main(argv: list[str]) -> None:
    rows: list = []
    import onnxsurgery.cli  # noqa: F401 - the imports the command pays before it starts

    instrument(rows)
    imported = time.perf_counter() - STARTED, time.process_time()
    atexit.register(show, rows, imported)
    sys.argv = ["onnxsurgery", *argv]
    runpy.run_module("onnxsurgery", run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
