"""bench/memory.py through tests/memory_probe.py: the peak is the process tree's anonymous memory,
children included, and mapped file pages do not count."""

from __future__ import annotations

import sys

from memory_probe import memory, peak_anon, probe

ALLOCATE = "import sys, time; b = bytearray(int(sys.argv[1])); time.sleep(0.3)"


def test_children_count_and_file_pages_do_not(tmp_path):
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {ALLOCATE!r}, '150000000'])"
    m = memory.measure([sys.executable, "-c", f"b = bytearray(100_000_000); exec({child!r})"])
    assert m.ok and m.processes >= 2
    assert 250e6 < m.peak_anon < 400e6
    data = tmp_path / "file.bin"
    data.write_bytes(b"\1" * 200_000_000)
    read = (f"import mmap, time; f = open({str(data)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ);"
            " s = sum(m[i] for i in range(0, len(m), 4096)); time.sleep(0.3)")
    mapped = memory.measure([sys.executable, "-c", read])
    assert mapped.ok and mapped.peak_anon < 100e6 and mapped.peak_rss > 150e6


def test_kill_above_stops_the_tree():
    m = memory.measure([sys.executable, "-c", ALLOCATE.replace("0.3", "30"), "300000000"], kill_above=int(100e6))
    assert not m.ok and "RssAnon" in m.killed and m.wall < 20


def test_probe_runs_this_checkout():
    assert peak_anon("--version") < 200e6
    failed = probe("info", "missing.onnx", check=False)
    assert failed.returncode == 2 and "missing.onnx" in failed.stderr_tail
