"""Arrays for the integers a weight is rounded to, made again from the memory of those whose
weight has gone (written to the spill file and dropped): every new array of a size at least
FROM_BYTES was fresh memory that the kernel zeroed page by page as the rounding first wrote
it, about a tenth of int8 `--no-verify`'s CPU time on a 1.35 GB decoder, whose layers repeat
the same few sizes. Only within `lending` (quantize.remembering, around a pass's plan and
its application); at most KEPT_BYTES of unused memory are kept meanwhile, all of it given
back when the outermost `lending` ends.

An array is unused when nothing refers to its memory any longer: every view of it, a
memoryview of it included, holds a reference to the array that owns the memory, which is
what is kept here and counted (sys.getrefcount)."""

from __future__ import annotations

import math
import sys
import threading
from contextlib import contextmanager

import numpy as np

FROM_BYTES = 1 << 20
KEPT_BYTES = 32 << 20  # the spill's batch (lazy.OFFLOAD_EVERY_BYTES): what is in flight anyway

_owners: list[np.ndarray] = []  # flat uint8 arrays, lent or not
_open = [0]
_lock = threading.Lock()


def _count_when_unused() -> int:
    """An owner's reference count, read as `empty` reads it, where only _owners holds it."""
    for owner in [np.empty(0)]:
        return sys.getrefcount(owner)


_UNUSED = _count_when_unused()


def empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """np.empty(shape, dtype), in memory used before where an unused array of the same size is
    kept (its contents are whatever was there: every element is written by the caller)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if not _open[0] or nbytes < FROM_BYTES:
        return np.empty(shape, dtype)
    with _lock:
        found, unused = None, []
        for owner in _owners:
            if sys.getrefcount(owner) <= _UNUSED:
                if found is None and owner.size == nbytes:
                    found = owner
                else:
                    unused.append(owner)
        if found is None:
            found = np.empty(nbytes, np.uint8)
            _owners.append(found)
        kept, dropped = 0, set()
        for owner in sorted(unused, key=lambda o: o.size):  # the smallest kept first: more of them
            kept += owner.size
            if kept > KEPT_BYTES:
                dropped.add(id(owner))
        if dropped:
            _owners[:] = [owner for owner in _owners if id(owner) not in dropped]
        del unused
    return found.view(dtype).reshape(shape)


@contextmanager
def lending():
    """Within it, `empty` makes arrays from the memory of unused ones (see above)."""
    with _lock:
        _open[0] += 1
    try:
        yield
    finally:
        with _lock:
            _open[0] -= 1
            if not _open[0]:
                _owners.clear()  # arrays still in use keep their own memory
