"""storage.kernel.same_bytes: libc's memcmp over any two buffers (merge_constants compares a
group's first member's mapping with each other member's), and the comparison without memcmp."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from onnxsurgery.storage import kernel


@pytest.fixture(params=["memcmp", "without"])
def compare(request, monkeypatch):
    if request.param == "without":
        monkeypatch.setattr(kernel, "_MEMCMP", [None])
    return kernel.same_bytes


def test_buffers_of_every_kind_compare_by_their_bytes(compare, tmp_path):
    data = np.random.default_rng(0).integers(0, 256, (9 << 20) + 3, dtype=np.uint8).tobytes()
    path = tmp_path / "d.bin"
    path.write_bytes(data + data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m, memoryview(m) as whole:
        first, second = whole[:len(data)], whole[len(data):]
        try:
            assert compare(first, second) and compare(first, data) and compare(bytearray(data), second)
            changed = bytearray(data)
            changed[-1] ^= 1
            assert not compare(first, changed) and not compare(changed, second)
            assert not compare(first, data[:-1]) and not compare(b"", first)
            assert compare(b"", bytearray()) and compare(memoryview(data)[5:9], data[5:9])
        finally:
            first.release()
            second.release()
