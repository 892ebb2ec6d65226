"""The written output's data file handed to the kernel's read-ahead before its verification
(`read_ahead`), so that the disk reads it while the result's session is made and run.

A verified `quant` of a streamed model writes its output with O_DIRECT (storage/spill.py: no
page-cache copy of each byte) and the result's session then maps it back from the disk: on the
1.36B decoder, 1.38 GB read back one fault's read-ahead window at a time, the run waiting on each
(the disk reads 1.0 GB/s here: ~1.4 s of the result's 3.9 s run). POSIX_FADV_WILLNEED asks for the
whole file (window by window), on a thread of its own: no copy in user space (the pages are the ones the
mapping would fault in), and the run finds them in the cache. Only where the file fits well in
what memory has free: a file larger would push out pages the run is still to read.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

# POSIX_FADV_WILLNEED reads at most the device's read-ahead size a call (Linux caps it: one call for
# a whole 640 MB file read 8 MB here), so the file is asked for a window at a time
WINDOW_BYTES = 8 << 20
# at most this share of MemAvailable is asked for; the rest is left to the mapping's own read-ahead
SHARE_OF_AVAILABLE = 0.5


def _available() -> int:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _advise(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        size = os.fstat(fd).st_size
        for offset in range(0, size, WINDOW_BYTES):  # one call reads at most the device's read-ahead
            os.posix_fadvise(fd, offset, WINDOW_BYTES, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass  # advice only: the mapping reads the file anyway
    finally:
        os.close(fd)


def read_ahead(model_path: str | os.PathLike) -> threading.Thread | None:
    """The model's `<name>.data` file (the staged output's, storage/staging.py) read into the page
    cache on a daemon thread, or None where there is none, it is too large, or the system has no
    posix_fadvise. The caller need not wait: the advice changes only when the bytes arrive."""
    path = Path(model_path)
    data = path.with_name(path.name + ".data")
    if not hasattr(os, "posix_fadvise"):
        return None
    try:
        size = data.stat().st_size
    except OSError:
        return None
    if not size or size > SHARE_OF_AVAILABLE * _available():
        return None
    thread = threading.Thread(target=_advise, args=(data,), name="onnxsurgery-read-ahead", daemon=True)
    thread.start()
    return thread
