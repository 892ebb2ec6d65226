"""Two Linux calls Python's os module lacks, through libc (ctypes), each None where missing:
fallocate(2) with its modes (os.posix_fallocate has none; adopt.py shifts a file's blocks with
them) and sync_file_range(2) (lazy.py starts the spill file's write-back with it)."""

from __future__ import annotations

import ctypes
import sys


_FALLOCATE: list = []


def fallocate_call():
    """libc's fallocate(2) (os.posix_fallocate has no modes), or None where there is none."""
    if not _FALLOCATE:
        function = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's on Linux
            function = libc.fallocate
            function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            function.restype = ctypes.c_int
        except (OSError, AttributeError):
            function = None
        _FALLOCATE.append(function)
    return _FALLOCATE[0]


_SYNC_FILE_RANGE: list = []


def start_write_back(fd: int, offset: int, length: int) -> None:
    """sync_file_range(SYNC_FILE_RANGE_WRITE): the range's dirty pages queued for the disk, not
    waited for (Linux); nothing where there is no such call."""
    if not _SYNC_FILE_RANGE:
        function = None
        if sys.platform.startswith("linux"):
            try:
                function = ctypes.CDLL(None, use_errno=True).sync_file_range
                function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            except (OSError, AttributeError):
                function = None
        _SYNC_FILE_RANGE.append(function)
    if _SYNC_FILE_RANGE[0] is not None:
        _SYNC_FILE_RANGE[0](fd, offset, length, 2)  # SYNC_FILE_RANGE_WRITE; a refusal changes nothing
