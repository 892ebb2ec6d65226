"""Peak resident memory that creating an onnxruntime CPU session adds, in a fresh process.

    python onnxsurgery/running/session_memory.py MODEL.onnx   ->  {"peak_growth": bytes, "rss_growth": bytes}

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
import tempfile
import time


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


class OverLimit(RuntimeError):
    """The session being measured held more than the limit it was given, and was stopped."""


def measure_in_fresh_process(path: str | os.PathLike, limit: int | None = None) -> dict[str, int]:
    """Run this file on `path` in a new Python process; its figures. With `limit` (bytes), the
    process is stopped once its anonymous memory passes it (OverLimit): what a default session
    holds grows with the model (every weight prepacked), and `report` on a model of several GB
    must not hold that much to find out."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, __file__, os.fspath(path)], stdout=out, stderr=err, text=True)
        over = False
        while proc.poll() is None:
            if limit is not None and _anon(proc.pid) > limit:
                proc.kill()
                over = True
            time.sleep(0.02)
        if over:
            raise OverLimit(f"a session holds more than {limit / 1e9:.1f} GB")
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        lines = (stderr or stdout).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit code {proc.returncode}")
    return json.loads(stdout.strip().splitlines()[-1])


def _anon(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


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
