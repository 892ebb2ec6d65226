"""Commands the zoo runs, each in a process of its own, measured: exit code, wall time, peak
anonymous memory of the process tree (bench/memory.py's sampling), all output kept; a runaway one
stopped."""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KILL_ABOVE = 12 * 2**30  # a shared 24 GB machine: stop a runaway command here (a failure)

_spec = importlib.util.spec_from_file_location("_bench_memory", ROOT / "bench" / "memory.py")
_memory = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("_bench_memory", _memory)
_spec.loader.exec_module(_memory)


@dataclass
class Ran:
    rc: int | None
    wall: float
    peak_anon: int
    stdout: str
    stderr: str
    killed: str
    cpu: float = 0.0  # user + sys seconds of the process tree (the zoo runs one command at a time)


def measured(cmd: list[str], timeout: float) -> Ran:
    """bench/memory.py's sampling (summed RssAnon of the tree every 20 ms), keeping all output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("PYTHONWARNINGS", None)
    peak, killed = 0, ""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        while proc.poll() is None:
            anon, _, _ = _memory.sample(proc.pid)
            peak = max(peak, anon)
            now = time.perf_counter() - start
            if not killed and anon > KILL_ABOVE:
                killed = f"RssAnon {anon / 1e9:.1f} GB > {KILL_ABOVE / 1e9:.0f} GB after {now:.0f} s"
                _memory._kill_tree(proc.pid)
            elif not killed and now > timeout:
                killed = f"did not finish in {timeout:.0f} s"
                _memory._kill_tree(proc.pid)
            time.sleep(0.02)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        out.seek(0)
        err.seek(0)
        return Ran(proc.returncode, wall, peak, out.read().decode(errors="replace"),
                   err.read().decode(errors="replace"), killed, cpu)


def ours(*args) -> list[str]:
    return [sys.executable, "-m", "onnxsurgery", *[str(a) for a in args]]
