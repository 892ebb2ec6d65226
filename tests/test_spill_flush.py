"""The spill file's flush points (storage/spill.py): `flushed` rises to each written batch's end,
only once its bytes are in the file; `wait_flushed` blocks until then; listeners hear each offset;
a failed batch or a closed file wakes waiters with False (the error still raised by `wait`); and
the workspace's `wait_spilled` says the same through ExternalFiles."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from onnxsurgery.storage import spill
from onnxsurgery.storage.lazy import ExternalFiles
from onnxsurgery.storage.spill import SpillFile


def payload(n: int, seed: int) -> memoryview:
    return memoryview(np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)).cast("B")


def test_flushed_rises_to_each_batch_end_once_its_bytes_are_in(tmp_path):
    file = SpillFile(Path(tmp_path))
    heard = []
    file.on_flush(heard.append)
    try:
        first = [(p, file.place(len(p))) for p in (payload(5000, 0), payload(70_000, 1))]
        assert file.flushed == 0
        file.write(first)
        end = first[-1][1] + len(first[-1][0])
        assert file.wait_flushed(end, timeout=30)
        for p, offset in first:  # readable at once: the flush point says so
            assert os.pread(file._fd, len(p), offset) == bytes(p)
        second = [(payload(9000, 2), file.place(9000))]
        file.write(second)
        last = second[0][1] + 9000
        assert file.wait_flushed(last, timeout=30)
        assert file.flushed == last
        file.wait()
        assert heard == [end, last]
        assert not file.wait_flushed(last + 1, timeout=0.05)  # nothing placed there: a timeout
    finally:
        file.close()
    assert not file.wait_flushed(last + 1)  # closed: no wait forever


def test_a_waiter_is_not_woken_before_the_batch_is_written(tmp_path, monkeypatch):
    gate = threading.Event()
    write = spill._write_batch

    def held(*args, **kwargs):  # the disk slow: the batch held until the test lets it go
        gate.wait(30)
        write(*args, **kwargs)

    monkeypatch.setattr(spill, "_write_batch", held)
    file = SpillFile(Path(tmp_path))
    try:
        p = payload(4096, 3)
        offset = file.place(len(p))
        file.write([(p, offset)])
        assert not file.wait_flushed(offset + len(p), timeout=0.1)
        assert file.flushed == 0
        gate.set()
        assert file.wait_flushed(offset + len(p), timeout=30)
        assert os.pread(file._fd, len(p), offset) == bytes(p)
    finally:
        gate.set()
        file.close()


def test_a_failed_batch_wakes_waiters_with_false(tmp_path, monkeypatch):
    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spill, "_write_batch", failing)
    file = SpillFile(Path(tmp_path))
    try:
        p = payload(100, 4)
        file.write([(p, file.place(len(p)))])
        assert not file.wait_flushed(len(p))  # no timeout given: woken by the failure
        with pytest.raises(OSError, match="No space"):
            file.wait()
        assert file.flushed == 0
    finally:
        file.close()


def test_external_files_say_when_their_spill_holds_an_offset(tmp_path):
    files = ExternalFiles(Path(tmp_path))
    assert not files.wait_spilled(1, timeout=0.01)  # no spill file: nothing will come
    assert not files.on_spill_flush(print)
    files.spill_into(Path(tmp_path))
    heard = []
    assert files.on_spill_flush(heard.append)
    spill_file = files._spill
    p = payload(3000, 5)
    offset = spill_file.place(len(p))
    spill_file.write([(p, offset)])
    assert files.wait_spilled(offset + len(p), timeout=30)
    spill_file.wait()
    assert heard == [offset + len(p)]
    files.close()


def test_a_taken_spill_wakes_waiters_on_later_offsets(tmp_path):
    file = SpillFile(Path(tmp_path))
    try:
        p = payload(2000, 6)
        file.write([(p, file.place(len(p)))])
        assert file.wait_flushed(len(p), timeout=30)
        file.wait()
        file.taken()  # the output's data file took it over: nothing more comes
        assert not file.wait_flushed(len(p) + 1)  # no timeout given: answered at once
    finally:
        file.close()
