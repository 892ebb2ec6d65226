"""The spill file: where large payloads a pass makes in memory wait for the export, read back on
demand (`lazy.ExternalFiles.offload` picks them; this module holds the file).

It is made in the output's folder (a temporary folder may be memory, tmpfs), without a name
(`O_TMPFILE`; elsewhere unlinked at once): nothing is left behind whatever happens, and the
output's data file can take it over by giving it one (adopt.py). Batches are written on a thread
of their own, one at a time, while the pass goes on to the next weights.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .kernel import start_write_back

# the spill file's location in an external reference: a name no file can have (a NUL)
SPILL_LOCATION = "\0spill"
SPILL_ALIGN = 4096  # each payload page-aligned
COPY_CHUNK_BYTES = 16 * 2**20


class SpillFile:
    """One spill file: where each payload goes (`place`), its batches written (`write`), read
    (`fd`) and handed over to the output (`adoptable`, `taken`)."""

    def __init__(self, folder: Path, *, write_back: bool = False):
        """`write_back`: the output will have a data file, which takes this file over after a
        flush of what is still dirty in it: each batch's write-back is started as it is written,
        while the disk is idle (dec-l4's 340 MB: 0.25-0.4 s of waiting at the end otherwise).
        Without it, the spill's pages may never reach the disk at all."""
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
        self._writing = self._writer.submit(_write_batch, self._fd, batch, self.write_back)

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
        add to it from now on."""
        self.was_taken = True

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)  # a batch still being written: its handle stays open until it is done
            self._writer, self._writing = None, None
        os.close(self._fd)


def _write_batch(fd: int, batch: list[tuple[memoryview, int]], write_back: bool = False) -> None:
    """Each (payload, offset) of a batch written at its offset of `fd`; `write_back`: the batch's
    write-back to the disk started."""
    for payload, offset in batch:
        done = 0
        while done < len(payload):
            done += os.pwrite(fd, payload[done:done + COPY_CHUNK_BYTES], offset + done)
    if write_back and batch:
        start = batch[0][1]
        start_write_back(fd, start, batch[-1][1] + len(batch[-1][0]) - start)
