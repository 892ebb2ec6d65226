"""The process's heap, where sessions come and go: onnxruntime's buffers are freed to glibc's
heap, which keeps them unless asked (give_back_freed_memory), and a thread's own heap keeps its
free end even then (one_heap); a streamed result's float copies reuse freed pages instead of
fresh ones (reused_pages). Nothing beyond glibc."""

from __future__ import annotations

import contextlib


def give_back_freed_memory() -> None:
    """Return the heap's free pages to the system (glibc's malloc_trim; elsewhere nothing). A
    session's freed buffers otherwise stay in the process's heap, and the next session's come on
    top of them: `quant` of a 1.2 MB conv net over 9 s of audio held 145-166 MB, the comparison
    of the same files 100 MB (bench/small_models.py)."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass


def one_heap() -> None:
    """Threads made from now on allocate from the main heap, as the main thread does (glibc's
    M_ARENA_MAX 1), so that what they free is given back with the rest (give_back_freed_memory).
    onnxruntime's buffers are few and large: one lock over them costs nothing measurable. Nothing
    beyond glibc."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, 1)
        except (OSError, AttributeError):  # not glibc (musl has no mallopt arenas)
            pass


@contextlib.contextmanager
def reused_pages(active: bool = True):
    """Within it, freed blocks up to REUSED_BYTES stay in the heap for the next allocation
    (glibc's mmap and trim thresholds raised), then the thresholds are set to where glibc's own
    rule takes them in a long run (its ceiling) and the free pages given back. Why: a streamed
    result's run (sessions.py) makes a float copy of each weight and frees it; glibc maps a block
    over 32 MiB afresh and unmaps it at its free, so every copy's pages were faulted in and
    zeroed by the kernel again (the 6.7B preset's widths at 2 layers, int4: 350K minor faults,
    2.35 s of system CPU in the verified run; 65-71K and 1.0-1.35 s so). The heap's peak is the
    copies alive at once, as before, and a freed block is reused whole or split."""
    if not active or not _mallopt(_M_MMAP_THRESHOLD, REUSED_BYTES):
        yield
        return
    _mallopt(_M_TRIM_THRESHOLD, 2 * REUSED_BYTES - 1)
    try:
        yield
    finally:
        # glibc has no "dynamic again": its dynamic thresholds' ceiling, which the first free of
        # a 32 MiB block reaches anyway (DEFAULT_MMAP_THRESHOLD_MAX on 64 bits, trim twice it)
        _mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
        _mallopt(_M_TRIM_THRESHOLD, 64 * 2**20)
        give_back_freed_memory()


def _mallopt(option: int, value: int) -> bool:
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(option, value))
    except (OSError, AttributeError):  # not glibc
        return False


# reused_pages: blocks under this come from the heap (a 6.7B decoder's lm_head half in float: 262 MB)
REUSED_BYTES = 2**30

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
_M_ARENA_MAX = -8  # malloc.h
