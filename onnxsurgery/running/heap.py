"""The process's heap, where sessions come and go: onnxruntime's buffers are freed to glibc's
heap, which keeps them unless asked (give_back_freed_memory), and a thread's own heap keeps its
free end even then (one_heap). Nothing beyond glibc."""

from __future__ import annotations


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


_M_ARENA_MAX = -8  # malloc.h
