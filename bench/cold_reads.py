"""How many times a command reads a model's data file from disk: the file evicted from the page
cache first, then the command run in a fresh process (bench/memory.py's `measure`), its disk
reads taken from the kernel's count for the reaped process tree (getrusage's ru_inblock: the
children's read_bytes, mapped pages faulted in included).

Issue 58 (a model larger than the page cache) measured on a model that fits: with the data file
cold, a byte read twice by the command is read from disk once, since the cache keeps it;
`--evict-every S` drops the file's pages again every S seconds while the command runs, a crude
stand-in for a cache too small to hold it (it also drops read-ahead pages not yet used, so it
overstates). `--cache-bytes N` is a closer one: every 50 ms the file's pages in the cache are
looked up (mincore) and the oldest beyond N bytes dropped, oldest by when they were first seen
there (a FIFO cache of N bytes: for the scans a quantizer makes, what the kernel's LRU does once
the file outgrows memory). Pages that a process maps are not dropped (onnxruntime maps the
whole file for a session's life): measure `--no-verify`, or read the figures as a lower bound.
`resident_before` says what stayed cached at the start (it should be 0).

    python bench/cold_reads.py --file m.onnx.data [--evict-every 2] -- python -m onnxsurgery quant m.onnx q.onnx

Prints one JSON object: read_bytes, reads (read_bytes over the files' size), wall, cpu, peak_anon,
load before. Linux only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import measure  # noqa: E402


def evict(path: str) -> None:
    """`path`'s pages dropped from the page cache (those no process maps; dirty ones written first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path: str) -> int | None:
    """`path`'s bytes in the page cache (util-linux fincore), or None without it."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


class FifoCache:
    """At most `limit` bytes of `path` left in the page cache, the oldest dropped (`step`)."""

    def __init__(self, path: str, limit: int):
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.path.getsize(path)
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.pages = -(-self.size // self.page)
        self.limit = limit // self.page
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self.libc = libc
        self.addr = libc.mmap(None, self.size, 1, 1, self.fd, 0)  # PROT_READ, MAP_SHARED: never touched
        self.vec = np.zeros(self.pages, np.uint8)
        self.seen = np.full(self.pages, np.inf)
        self.tick = 0

    def step(self) -> None:
        self.tick += 1
        if self.libc.mincore(ctypes.c_void_p(self.addr), self.size, self.vec.ctypes.data) != 0:
            return
        cached = (self.vec & 1).astype(bool)
        self.seen[~cached] = np.inf
        self.seen[cached & np.isinf(self.seen)] = self.tick
        over = int(cached.sum()) - self.limit
        if over <= 0:
            return
        oldest = np.sort(np.argsort(self.seen, kind="stable")[:over])
        breaks = np.flatnonzero(np.diff(oldest) != 1) + 1  # contiguous runs, one fadvise each
        for run in np.split(oldest, breaks):
            os.posix_fadvise(self.fd, int(run[0]) * self.page, len(run) * self.page, os.POSIX_FADV_DONTNEED)


def cold_run(cmd: list[str], files: list[str], evict_every: float = 0.0, cache_bytes: int = 0) -> dict:
    for f in files:
        evict(f)
    before = [resident(f) for f in files]
    load = os.getloadavg()[0]
    stop = threading.Event()

    def evicting():
        while not stop.wait(evict_every):
            for f in files:
                evict(f)
    if evict_every:
        threading.Thread(target=evicting, daemon=True).start()
    if cache_bytes:
        caches = [FifoCache(f, cache_bytes) for f in files]

        def capping():
            while not stop.wait(0.05):
                for c in caches:
                    c.step()
        threading.Thread(target=capping, daemon=True).start()
    start = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        m = measure(cmd)
    finally:
        stop.set()
    end = resource.getrusage(resource.RUSAGE_CHILDREN)
    read = (end.ru_inblock - start.ru_inblock) * 512
    size = sum(os.path.getsize(f) for f in files)
    return {"returncode": m.returncode, "read_bytes": read, "reads": round(read / size, 3),
            "resident_before": before, "wall": round(m.wall, 2), "cpu": round(m.cpu, 2),
            "peak_anon": m.peak_anon, "load": round(load, 1), "evict_every": evict_every,
            "cache_bytes": cache_bytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", action="append", required=True, help="a data file to read cold (repeatable)")
    ap.add_argument("--evict-every", type=float, default=0.0, help="evict again every S seconds (0: once)")
    ap.add_argument("--cache-bytes", type=float, default=0, help="at most this many bytes of each file cached (FIFO)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    print(json.dumps(cold_run(cmd, args.file, args.evict_every, int(args.cache_bytes))))


if __name__ == "__main__":
    main()
