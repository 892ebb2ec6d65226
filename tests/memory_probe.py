"""Peak anonymous memory of an `onnxsurgery` command, for tests that bound it (issue 48).

    from memory_probe import peak_anon, probe     # tests/ is on sys.path (conftest.py)
    assert peak_anon("quant", model, out, "--no-verify") < 300e6

Each call runs `[sys.executable, "-m", "onnxsurgery", *args]` in a fresh process, with this
checkout first on PYTHONPATH (so the tree under test runs, not an installed copy), and samples
the summed RssAnon of the process and its children every 20 ms (bench/memory.py, which this
loads by path). RssAnon is what a process cannot give back; a memory-mapped model's file pages
do not count.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("_bench_memory", ROOT / "bench" / "memory.py")
memory = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("_bench_memory", memory)
_spec.loader.exec_module(memory)


def probe(*args, timeout: float = 600, kill_above: float | None = None, check: bool = True,
          interval: float = 0.02) -> "memory.Measurement":
    """Run `python -m onnxsurgery ARGS` and measure it; with `check`, fail (AssertionError with
    the end of stderr) unless it exits 0. `kill_above`: bytes past which it is stopped."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, "-m", "onnxsurgery", *(str(a) for a in args)]
    m = memory.measure(cmd, env=env, timeout=timeout, interval=interval,
                       kill_above=int(kill_above) if kill_above else None)
    if check:
        assert m.ok, f"{' '.join(cmd[2:])}: exit {m.returncode} {m.killed}\n{m.stderr_tail}"
    return m


def peak_anon(*args, **options) -> int:
    """Peak summed RssAnon, in bytes, of `python -m onnxsurgery ARGS` (see `probe`)."""
    return probe(*args, **options).peak_anon
