"""Two Linux calls Python's os module lacks, through libc (ctypes), each None where missing:
fallocate(2) with its modes (os.posix_fallocate has none; adopt.py shifts a file's blocks with
them) and sync_file_range(2) (lazy.py starts the spill file's write-back with it); and libc's
memcmp over any two buffers (`same_bytes`)."""

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


_MEMCMP: list = []


def same_bytes(a, b) -> bool:
    """Whether the buffers `a` and `b` (bytes, bytearray, memoryview, a mapping's view) hold the
    same bytes: one memcmp, which stops at the first byte that differs. Python compares a
    memoryview with another item by item (75 ms for 9.4 MB against memcmp's 12), so two read-only
    mappings were compared by copying one into a bytearray first."""
    import numpy as np

    x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)  # views: their addresses, no copy
    if x.size != y.size:
        return False
    if not _MEMCMP:
        function = None
        try:
            function = ctypes.CDLL(None).memcmp
            function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            function.restype = ctypes.c_int
        except (OSError, AttributeError):
            function = None
        _MEMCMP.append(function)
    if _MEMCMP[0] is not None and x.size:
        return _MEMCMP[0](x.ctypes.data, y.ctypes.data, x.size) == 0
    step = 1 << 22  # no memcmp: compared 4 MiB at a time, as bytes
    return all(x[i:i + step].tobytes() == y[i:i + step].tobytes() for i in range(0, x.size, step))
