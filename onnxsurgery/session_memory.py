"""Peak resident memory that creating an onnxruntime CPU session adds, in a fresh process.

    python onnxsurgery/session_memory.py MODEL.onnx   ->  {"peak_growth": bytes, "rss_growth": bytes}

The figure is VmHWM after session creation minus VmRSS before it (onnxruntime imported, nothing
loaded): what loading the file costs on a device, folding and all. Run it in a process of its
own: a process's high-water mark never goes down, so a second model measured in the same
process would hide below the first one's peak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_in_fresh_process(path: str | os.PathLike) -> dict[str, int]:
    """Run this file on `path` in a new Python process; its figures."""
    r = subprocess.run([sys.executable, __file__, os.fspath(path)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit code {r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(path: str) -> None:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    before = _status("VmRSS")
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    print(json.dumps({"peak_growth": _status("VmHWM") - before, "rss_growth": _status("VmRSS") - before}))
    del session


if __name__ == "__main__":
    main(sys.argv[1])
