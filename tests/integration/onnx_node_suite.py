"""onnx's own operator tests (onnx.backend.test.case.node), generated from the installed onnx:
about 1,900 one-operator models with inputs. Every case that onnxruntime runs goes through each
command, and the result is checked in onnxruntime on the case's own inputs:

- shrink (min_elements=1): outputs bit-identical;
- npy (min_elements=1), run with `run_model` (the .npy arrays back as initializers), then
  embed: outputs bit-identical, both times;
- quant (min_elements=1, no verification): the result loads and runs, with outputs of the
  same types and shapes; a weight that cannot be quantized is skipped, never a crash.

A library error (onnxsurgery's own, one line for the user) is an accepted outcome for quant only
when it says what it refused; any other exception is a failure. Run by `make test-onnx-suite`.
"""

from __future__ import annotations

import fnmatch
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import onnxsurgery
from onnxsurgery.errors import OnnxSurgeryError

COMMANDS = ("shrink", "npy-embed", "quant")
# Known failures, each with its reason (docs/limits.md). The run fails if one of these
# starts passing (take it off the list) as well as on any other failure.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}  # none since run_model gives .npy arrays as initializers


def known(command: str, name: str) -> str | None:
    return next((why for (c, pattern), why in KNOWN_FAILURES.items()
                 if c == command and fnmatch.fnmatchcase(name, pattern)), None)


def cases():
    """(name, model, feeds) for every node test case whose first data set onnxruntime runs."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own numpy overflow warnings
        collected = collect_testcases(None)
    for case in collected:
        if not case.data_sets:
            continue
        inputs = case.data_sets[0][0]
        initialized = {t.name for t in case.model.graph.initializer}
        names = [i.name for i in case.model.graph.input if i.name not in initialized]
        feeds = dict(zip(names, inputs))
        if _run(case.model.SerializeToString(), feeds) is None:
            continue
        yield case.name, case.model, feeds


def _session(model: bytes | str):
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _run(model: bytes | str, feeds: dict) -> list | None:
    try:
        return _session(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime's own types: this case is not one it runs
        return None


def _same(a, b) -> bool:
    """Bit-identical values (NaN equal to NaN), recursively through sequences and optionals."""
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return a.tobytes() == b.tobytes() or np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


def _like(a, b) -> bool:
    """Same types and shapes (quant changes values, within its error)."""
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(_like, a, b))
    if a is None or b is None:
        return a is None and b is None
    return np.asarray(a).dtype == np.asarray(b).dtype and np.asarray(a).shape == np.asarray(b).shape


def check(command: str, name: str, model: onnx.ModelProto, feeds: dict) -> str | None:
    """None if `command` passes on this case, else what went wrong, in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "case.onnx", Path(tmp) / "out.onnx"
        onnx.save(model, str(src))
        expected = _run(str(src), feeds)
        try:
            if command == "shrink":
                onnxsurgery.shrink_file(src, out, min_elements=1, verify=False)
                got = _run(str(out), feeds)
                return None if got is not None and all(map(_same, expected, got)) else "outputs differ"
            if command == "npy-embed":
                onnxsurgery.npy_file(src, out, min_elements=1)
                # run_model gives the .npy arrays back as the initializers they were: the
                # original's graph, so its outputs to the bit (both through run_model's settings)
                reference, got = (list(onnxsurgery.run_model(p, feeds).values()) for p in (src, out))
                if not all(map(_same, reference, got)):
                    return "npy: outputs differ"
                back = Path(tmp) / "back.onnx"
                onnxsurgery.embed_file(out, back)
                got = _run(str(back), feeds)
                return None if got is not None and all(map(_same, expected, got)) else "embed: outputs differ"
            onnxsurgery.quant_file(src, out, verify=False, min_elements=1)
            got = _run(str(out), feeds)
            return None if got is not None and all(map(_like, expected, got)) else "quant: fails to run or reshaped"
        except OnnxSurgeryError as e:
            if command == "quant":
                return None  # refused with a reason for the user
            return f"refused: {e}"
        except Exception as e:  # noqa: BLE001 - any other exception is the failure reported
            return f"internal error: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def main() -> int:
    import sys

    commands = sys.argv[1:] or list(COMMANDS)
    failures, expected, count = {c: [] for c in commands}, {c: [] for c in commands}, 0
    for name, model, feeds in cases():
        count += 1
        for command in commands:
            why = check(command, name, model, feeds)
            reason = known(command, name)
            if why and reason:
                expected[command].append(name)
            elif why:
                failures[command].append(f"{name}: {why}")
            elif reason:
                failures[command].append(f"{name}: passes now; take it off KNOWN_FAILURES")
    for command in commands:
        print(f"{command}: {count - len(failures[command]) - len(expected[command])} of {count} cases pass"
              + (f", {len(expected[command])} known failures" if expected[command] else ""))
        for (c, prefix), why in KNOWN_FAILURES.items():
            if c == command and expected[command]:
                print(f"    known: {prefix} ({len(expected[command])}): {why}")
        for line in failures[command][:50]:
            print("   ", line)
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
