"""storage/direct_copy.py: a large file copied with O_DIRECT from a mapping of the source (the
data file of a model `shrink` has nothing to merge in) is the source byte for byte, whatever
its size against the blocks and windows, and a file system that refuses O_DIRECT gets the
usual copy."""

from __future__ import annotations

import os

import pytest

import onnxsurgery.storage.direct_copy as dc


@pytest.mark.parametrize("size", [0, 5, 4096, 4097, 3 * 8192, 3 * 8192 + 4095, 5 * 8192 + 1])
def test_copy_is_the_source_byte_for_byte(tmp_path, monkeypatch, size):
    monkeypatch.setattr(dc, "DIRECT_FROM_BYTES", 0)
    monkeypatch.setattr(dc, "WINDOW", 8192)  # several windows, the last one short
    data = os.urandom(size)
    (tmp_path / "src").write_bytes(data)
    (tmp_path / "dst").write_bytes(b"x" * (size + 9000))  # longer than the copy: truncated
    dc.copy_large_file(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == data


def test_refused_direct_io_copies_as_cp_does(tmp_path, monkeypatch):
    monkeypatch.setattr(dc, "DIRECT_FROM_BYTES", 0)
    real_open = os.open

    def refuse_direct(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(dc.os, "open", refuse_direct)
    data = os.urandom(3 * 4096 + 17)
    (tmp_path / "src").write_bytes(data)
    dc.copy_large_file(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == data
