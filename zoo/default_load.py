"""Invariant 15: a written model loads in a default onnxruntime session, created in a child process.

onnxsurgery's own sessions (running/sessions.py) turn the NchwcTransformer off, and the zoo's runs
load in-process where a crash would end the run; neither sees what a user's plain
`InferenceSession(path)` does. Found 2026-11-30 (twenty-third round, arabic_diacritizer_bilstm's
float16 variant): onnxruntime 1.32 dies with signal 11 creating a default session (ORT_ENABLE_ALL)
of any graph where a float16 Transpose with perm [1, 0, 2] feeds a MatMul whose B is a float16
initializer (torch writes that Transpose after a batch_first LSTM); with the NchwcTransformer off
it loads. `quant` of such a model verified its result ("default graph optimizations") and wrote a
file that crashes the same way (the arith and scaled lowerings fold back to a float16 initializer;
`--lowering dq` keeps the DequantizeLinear and loads); its report now says so
(onnxsurgery/running/default_crash.py). lac_chinese's float16 GRUs crashed the zoo the same way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = "import sys, onnxruntime as ort; ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"


def probe(path: Path, timeout: float = 300) -> tuple[int, str]:
    """(return code, why) of creating a default CPU session of `path` (a file, or a folder's .onnx)
    in a fresh interpreter: 0 and "" where it loads, a negative code (-signal) where it dies."""
    model = next(path.glob("*.onnx")) if path.is_dir() else path
    r = subprocess.run([sys.executable, "-c", PROBE, str(model)], capture_output=True, text=True, timeout=timeout)
    if r.returncode == 0:
        return 0, ""
    if r.returncode < 0:
        return r.returncode, f"signal {-r.returncode}"
    lines = r.stderr.strip().splitlines()
    return r.returncode, (lines[-1][:200] if lines else f"exit {r.returncode}")


def loads_by_default(command: str, rc: int, why: str, original_rc: int = 0) -> list[str]:
    """The invariant, pure: `rc`/`why` from probe() of what `command` wrote, `original_rc` of its input."""
    if rc == 0:
        return []
    also = " (its input too)" if original_rc != 0 else ""
    return [f"{command}: its written model does not load in a default onnxruntime session{also}: {why}"]


def written_loads(command: str, written: Path, original: Path) -> list[str]:
    """Invariant 15 for one command's written model: probed, and where it does not load, its input
    too (a model that never loaded by default is said so, not blamed on the command)."""
    rc, why = probe(written)
    return loads_by_default(command, rc, why, probe(original)[0] if rc else 0)
