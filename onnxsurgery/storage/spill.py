"""The spill file: where large payloads a pass makes in memory wait for the export, read back on
demand (`lazy.ExternalFiles.offload` picks them; this module holds the file).

It is made in the output's folder (a temporary folder may be memory, tmpfs), without a name
(`O_TMPFILE`; elsewhere unlinked at once): nothing is left behind whatever happens, and the
output's data file can take it over by giving it one (adopt.py). Batches are written on a thread
of their own, one at a time, while the pass goes on to the next weights.

With `direct` (`quant`'s output, but for --target tensorrt, whose check reads it back at once),
large payloads bypass the page cache (O_DIRECT, through a small aligned buffer): the kernel's
copy of each byte into a new page-cache page was 15% of int8's CPU samples on a 1.35 GB decoder
(pwrite: 0.65 s of system time for its 348 MB), and adopt.py's block shifts then find nothing
dirty to write back first. The disk writes them on the spill's thread meanwhile. A verified
`quant` reads the output back from the disk then (dec-l4 int4, 207 MB: 0.1 s, 0.01 s of CPU on
this machine's disk), against the page cache's copy (verified int8: 1.2 -> 0.65 s of system time).

Flush points (issue 58's lockstep): batches are placed at rising offsets and written one after
the other, so once a batch is written every byte placed before its end is in the file. `flushed`
is that offset; `wait_flushed` blocks a reader (a stage of the result's verification) until its
payloads are in, and `on_flush` callbacks hear each new offset on the spill's thread. A failed
or closed spill wakes every waiter with False; its error is raised by `wait`, as before.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
from pathlib import Path

from .kernel import start_write_back

# the spill file's location in an external reference: a name no file can have (a NUL)
SPILL_LOCATION = "\0spill"
SPILL_ALIGN = 4096  # each payload page-aligned
COPY_CHUNK_BYTES = 16 * 2**20
# `direct`: payloads of DIRECT_FROM_BYTES or more are written with O_DIRECT in whole blocks
# (their tail through the page cache), copied through an aligned buffer of BOUNCE_BYTES (a
# quantized array's memory is not block-aligned): 4 MiB of anonymous memory while spilling
DIRECT_FROM_BYTES = 1 << 20
BOUNCE_BYTES = 4 << 20
DIRECT_BLOCK = 4096  # O_DIRECT's alignment of offsets, lengths and memory (512 on most disks; 4096 on all)


class SpillFile:
    """One spill file: where each payload goes (`place`), its batches written (`write`), read
    (`fd`) and handed over to the output (`adoptable`, `taken`)."""

    def __init__(self, folder: Path, *, write_back: bool = False, direct: bool = False):
        """`write_back`: the output will have a data file, which takes this file over after a
        flush of what is still dirty in it: each batch's write-back is started as it is written,
        while the disk is idle (dec-l4's 340 MB: 0.25-0.4 s of waiting at the end otherwise).
        Without it, the spill's pages may never reach the disk at all. `direct`: large payloads
        written with O_DIRECT (module doc), where the file system takes it."""
        self.write_back = write_back
        try:  # nameless from the start, so that the output's data file can become it (adoptable)
            self._fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o666)
            self.nameless = True
        except (AttributeError, OSError):  # not Linux, or a file system without O_TMPFILE
            self._fd, name = tempfile.mkstemp(prefix=".onnxsurgery-spill.", dir=folder)
            os.unlink(name)
            self.nameless = False
        self.size = 0  # bytes placed
        self.was_taken = False  # its bytes moved by the output's data file that took it
        self._writer = None  # the thread that writes the batches
        self._writing = None  # the future of the batch it is writing
        self._direct = _Direct.opened(self._fd) if direct else None
        self._flushed = 0  # every byte placed below this offset is in the file
        self._ended = False  # a batch failed, or the file closed: nothing more will flush
        self._flush_change = threading.Condition()
        self._listeners: list = []

    def place(self, length: int) -> int:
        """The page-aligned offset where a payload of `length` bytes goes."""
        offset = self.size + (-self.size % SPILL_ALIGN)
        self.size = offset + length
        return offset

    def write(self, batch: list[tuple[memoryview, int]]) -> None:
        """Write each (payload, offset) on the writer thread, once the batch before is written:
        the payloads alive beyond the old bound are one batch's (the writes held both cores'
        rounding up: 0.2-0.4 s of int8 on a 1.35 GB decoder)."""
        self.wait()
        if self._writer is None:
            from concurrent.futures import ThreadPoolExecutor
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="spill")
        end = max((offset + len(payload) for payload, offset in batch), default=0)
        self._writing = self._writer.submit(self._write_and_flush, batch, end)

    def _write_and_flush(self, batch: list[tuple[memoryview, int]], end: int) -> None:
        try:
            _write_batch(self._fd, batch, self.write_back, self._direct)
        except BaseException:
            self._end()
            raise
        with self._flush_change:
            self._flushed = max(self._flushed, end)
            self._flush_change.notify_all()
        for listener in list(self._listeners):
            listener(self._flushed)

    @property
    def flushed(self) -> int:
        """The offset below which every placed byte is written (readable through `fd`)."""
        return self._flushed

    def on_flush(self, listener) -> None:
        """`listener(offset)` called on the spill's thread each time `flushed` rises to `offset`
        (keep it short: the next batch waits for it)."""
        self._listeners.append(listener)

    def wait_flushed(self, offset: int, timeout: float | None = None) -> bool:
        """Block until the bytes below `offset` are written: True, or False where the spill failed,
        was closed, or `timeout` (seconds) passed first."""
        with self._flush_change:
            return self._flush_change.wait_for(lambda: self._flushed >= offset or self._ended, timeout) \
                and self._flushed >= offset

    def _end(self) -> None:
        with self._flush_change:
            self._ended = True
            self._flush_change.notify_all()

    def wait(self) -> None:
        """Wait until the batch being written is in the file (its error raised here)."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def fd(self) -> int:
        """The handle to read from, every batch written."""
        if self.was_taken:
            raise RuntimeError("the spill file became an output's data file: its payloads were moved")
        self.wait()
        return self._fd

    def adoptable(self) -> int | None:
        """A handle on the file, its batches all written, where it has no name yet and can be
        given one: the output's data file may take it over (`adopt.adopt_spill`) rather than
        copy its payloads. None where it cannot."""
        if not self.nameless or self.was_taken:
            return None
        self.wait()
        return self._fd

    def taken(self) -> None:
        """The output's data file took the file over and moved its bytes: nothing may read or
        add to it from now on (waiters on later offsets woken: nothing more will flush)."""
        self.was_taken = True
        self._end()

    def close(self) -> None:
        self._end()
        if self._writer is not None:
            self._writer.shutdown(wait=True)  # a batch still being written: its handle stays open until it is done
            self._writer, self._writing = None, None
        if self._direct is not None:
            self._direct.close()
            self._direct = None
        os.close(self._fd)


class _Direct:
    """A second handle on the spill file, opened with O_DIRECT, and the aligned buffer its
    writes copy through."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = mmap.mmap(-1, BOUNCE_BYTES)  # anonymous: page-aligned
        self.view = memoryview(self.buffer)
        self.refused = False  # the file system refused a direct write: the page cache from then on

    @staticmethod
    def opened(fd: int) -> "_Direct | None":
        """The handle (the file reopened through /proc, Linux: it has no name), or None where
        O_DIRECT or the reopening is refused (tmpfs, other systems)."""
        if not hasattr(os, "O_DIRECT"):
            return None
        try:
            return _Direct(os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_DIRECT))
        except OSError:
            return None

    def write(self, payload: memoryview, offset: int) -> int:
        """How many bytes of `payload` (its whole blocks, from the start) were written at
        `offset` (a multiple of DIRECT_BLOCK); 0 where the first write was refused."""
        bulk = len(payload) - len(payload) % DIRECT_BLOCK
        if self.refused or len(payload) < DIRECT_FROM_BYTES or offset % DIRECT_BLOCK:
            return 0
        done = 0
        while done < bulk:
            length = min(BOUNCE_BYTES, bulk - done)
            self.view[:length] = payload[done:done + length]
            written = 0
            while written < length:
                try:
                    written += os.pwrite(self.fd, self.view[written:length], offset + done + written)
                except OSError:
                    if done or written:
                        raise
                    self.refused = True
                    return 0
            done += length
        return done

    def close(self) -> None:
        os.close(self.fd)
        self.view.release()
        self.buffer.close()


def _write_batch(fd: int, batch: list[tuple[memoryview, int]], write_back: bool = False,
                 direct: _Direct | None = None) -> None:
    """Each (payload, offset) of a batch written at its offset of `fd` (its whole blocks with
    `direct` where it takes them); `write_back`: the batch's write-back to the disk started."""
    for payload, offset in batch:
        done = direct.write(payload, offset) if direct is not None else 0
        while done < len(payload):
            done += os.pwrite(fd, payload[done:done + COPY_CHUNK_BYTES], offset + done)
    if write_back and batch:
        start = batch[0][1]
        start_write_back(fd, start, batch[-1][1] + len(batch[-1][0]) - start)
