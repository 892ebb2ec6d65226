"""Run a command in a fresh subprocess and measure its memory the way issue 48 counts it.

Every `interval` (20 ms) it reads /proc/PID/status of the process and of all its descendants
and sums their `RssAnon` (anonymous resident memory: what a process cannot give back; pages of a
memory-mapped model file are page cache and do not count) and their `VmRSS` (everything resident,
mapped file pages included); the figures are the peaks of those sums. Also: wall time, CPU time
(user + system, the child's and its reaped descendants', from wait4), the kernel's own peak RSS of
the child (`maxrss`, which a 20 ms sampler cannot miss, but counts file pages too), the exit
code and the last line of stderr.

Library:

    from memory import measure            # bench/ on sys.path
    m = measure([sys.executable, "-m", "onnxsurgery", "info", "model.onnx"])
    m.peak_anon, m.peak_rss, m.wall, m.returncode, m.as_dict()

CLI (prints one JSON object):

    python bench/memory.py [--interval 0.02] [--kill-above GB] [--timeout S] [--timeline] -- CMD ...

`--kill-above` stops the whole process tree once its summed RssAnon passes that many GB (on a
shared machine, a regression should fail the run rather than the machine); the result then says
`killed`. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field


@dataclass
class Measurement:
    cmd: list[str]
    returncode: int | None = None
    wall: float = 0.0  # s
    cpu: float = 0.0  # s, user + system
    peak_anon: int = 0  # bytes: peak of the summed RssAnon over the process tree
    peak_rss: int = 0  # bytes: peak of the summed VmRSS over the process tree
    maxrss: int = 0  # bytes: the child's own peak RSS from the kernel (wait4)
    peak_anon_at: float = 0.0  # s after start
    processes: int = 1  # most processes seen at once
    samples: int = 0
    killed: str = ""  # why the tree was stopped, if it was
    stdout: str = ""
    stderr_tail: str = ""
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (s, summed RssAnon bytes), if asked

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.killed

    def as_dict(self, *, output: bool = False) -> dict:
        d = asdict(self)
        if not output:
            d.pop("stdout")
        if not self.timeline:
            d.pop("timeline")
        return d


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (through /proc/PID/task/*/children, else a scan of /proc)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    try:
        for tid in tasks:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(c) for c in f.read().split())
        return found
    except FileNotFoundError:  # kernels without CONFIG_PROC_CHILDREN
        pass
    except OSError:
        return found
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                if int(stat.rpartition(")")[2].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p not in out:
            out.append(p)
            todo.extend(_children(p))
    return out


def status_bytes(pid: int, keys: tuple[str, ...] = ("RssAnon", "VmRSS")) -> dict[str, int]:
    """The `keys` of /proc/PID/status in bytes (missing ones absent: a zombie has none)."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in keys:
                    values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return values


def sample(pid: int) -> tuple[int, int, int]:
    """(summed RssAnon, summed VmRSS, process count) over `pid`'s tree now."""
    anon = rss = count = 0
    for p in tree(pid):
        values = status_bytes(p)
        if values:
            anon += values.get("RssAnon", 0)
            rss += values.get("VmRSS", 0)
            count += 1
    return anon, rss, count


def _kill_tree(pid: int) -> None:
    for p in reversed(tree(pid)):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def measure(cmd: list[str], *, interval: float = 0.02, env: dict | None = None, cwd: str | None = None,
            timeout: float | None = None, kill_above: int | None = None, capture_stdout: bool = False,
            timeline: bool = False) -> Measurement:
    """Run `cmd` (stdin closed; stdout discarded unless `capture_stdout`) and measure it (module
    doc). `kill_above`: bytes of summed RssAnon past which the tree is killed; `timeout`: seconds."""
    m = Measurement([str(c) for c in cmd])
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(m.cmd, stdin=subprocess.DEVNULL, stdout=out if capture_stdout else subprocess.DEVNULL,
                                stderr=err, env=env, cwd=cwd)
        reaped, status, usage = False, 0, None
        try:
            while True:
                waited, status, usage = os.wait4(proc.pid, os.WNOHANG)
                now = time.perf_counter() - start
                if waited:
                    reaped = True
                    break
                anon, rss, count = sample(proc.pid)
                m.samples += 1
                if anon > m.peak_anon:
                    m.peak_anon, m.peak_anon_at = anon, now
                m.peak_rss, m.processes = max(m.peak_rss, rss), max(m.processes, count)
                if timeline:
                    m.timeline.append((round(now, 3), anon))
                if kill_above and anon > kill_above and not m.killed:
                    m.killed = f"RssAnon {anon / 1e9:.2f} GB > {kill_above / 1e9:.2f} GB after {now:.1f} s"
                    _kill_tree(proc.pid)
                elif timeout and now > timeout and not m.killed:
                    m.killed = f"timeout after {timeout:.0f} s"
                    _kill_tree(proc.pid)
                time.sleep(interval)
        finally:
            if not reaped:  # interrupted: leave nothing behind
                _kill_tree(proc.pid)
                _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        m.wall = time.perf_counter() - start
        m.returncode = proc.returncode
        m.cpu = usage.ru_utime + usage.ru_stime
        m.maxrss = usage.ru_maxrss * 1024
        if capture_stdout:
            out.seek(0)
            m.stdout = out.read().decode(errors="replace")
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
        m.stderr_tail = "\n".join(lines[-3:])
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 usage="%(prog)s [options] -- CMD [ARGS...]")
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between samples (default 0.02)")
    ap.add_argument("--kill-above", type=float, help="GB of summed RssAnon past which the command is killed")
    ap.add_argument("--timeout", type=float, help="seconds")
    ap.add_argument("--timeline", action="store_true", help="include every (seconds, RssAnon) sample")
    ap.add_argument("--stdout", action="store_true", help="include the command's stdout")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    m = measure(cmd, interval=args.interval, timeout=args.timeout, capture_stdout=args.stdout,
                kill_above=int(args.kill_above * 1e9) if args.kill_above else None, timeline=args.timeline)
    print(json.dumps(m.as_dict(output=args.stdout)))
    return 0 if m.ok else 1


if __name__ == "__main__":
    sys.exit(main())
