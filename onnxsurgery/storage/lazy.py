"""Open a model without reading its weights.

`onnx.load` parses the whole file: the file's bytes plus a parsed copy, about twice the model
in memory, and most of the run time on a weight-heavy model. Here a small scanner walks the
protobuf wire format of the .onnx, and every tensor whose `raw_data` is at least
`LAZY_THRESHOLD` bytes is rewritten into a standard external-data reference (location = the
.onnx itself, offset, length). Only the small remainder is parsed by protobuf. Tensors that
already live in external data files keep their references.

Constants then read their bytes on demand (`FileBackedValues.read`, file_backed.py), so a pass
that only needs a fingerprint reads a few samples, and a tensor that is dropped is never read at
all. `materialize` puts the bytes back into a result model before it is returned or saved.

The gs side (FileBackedValues, held_payload, payload_in_file) is file_backed.py's, imported on
first use: `shrink`'s direct path (api/shrink_direct.py) opens, merges and writes a model with
no gs object, and so no onnx-graphsurgeon import (5-8 ms of its CPU).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from .paths import confined, external_ref
from .skim import LAZY_THRESHOLD, read_model_skipping_weights  # noqa: F401 (read_model_skipping_weights: its old home)
from .spill import SPILL_LOCATION, SpillFile

OFFLOAD_EVERY_BYTES = 32 * 2**20


# -- reading tensor bytes on demand -----------------------------------------------------------


class ExternalFiles:
    """Open handles on the files a model's external references point into. `data_files` names
    those other than the .onnx itself (the input's own external data files); `model_file` is
    the .onnx's own name, which the user gave, so it is the one location not held to
    `paths.confined` (`io.open_model` checks the others before this is made; this is the second
    line, for a reference made or changed since)."""

    def __init__(self, base_dir: Path, data_files: frozenset[str] = frozenset(), *, model_file: str | None = None):
        self.base_dir = base_dir
        self.data_files = data_files
        self.model_file = model_file
        self._fds: dict[str, int] = {}
        self._held: dict[str, memoryview] = {}
        self._spill: SpillFile | None = None  # `spill_into`'s file (spill.py)
        self._pending = 0  # bytes a pass reported `produced` since the last offload
        self.spill_folder: Path | None = None  # `spill_into`'s folder

    def hold(self, payload: np.ndarray | bytes) -> str:
        """A location whose bytes are `payload` (a C-contiguous array, or bytes), kept until
        `close`: an exported model refers to a quantized weight there instead of holding a copy
        (`export.export_model`), and the writer copies it straight into the output. The name holds
        a NUL, which no file name can: it never stands for a file, and no file's name for it."""
        location = f"\0held:{len(self._held)}"
        self._held[location] = memoryview(payload).cast("B") if isinstance(payload, np.ndarray) else memoryview(payload)
        return location

    def spill_into(self, folder: Path, *, write_back: bool = False, direct: bool = False) -> None:
        """From now on `offload` moves large payloads made in memory to a spill file in `folder`
        (the output's; spill.py). `write_back`: the output will have a data file, which takes the
        spill file over (adopt.py); `direct`: nothing reads the output back in this run, so large
        payloads may bypass the page cache (spill.py)."""
        self.spill_folder = folder  # where other passes' scratch files go too (held_roundings)
        if self._spill is None:
            self._spill = SpillFile(folder, write_back=write_back, direct=direct)

    @property
    def spilling(self) -> bool:
        return self._spill is not None

    def produced(self, graph, nbytes: int) -> None:
        """A pass made `nbytes` of new payloads in memory; once OFFLOAD_EVERY_BYTES of them have
        gathered, `offload` them (one walk over the graph's constants per batch, not per tensor)."""
        self._pending += nbytes
        if self._pending >= OFFLOAD_EVERY_BYTES:
            self.offload(graph)

    def offload(self, graph) -> int:
        """Move each initializer of `graph` (all scopes) whose payload of at least
        LAZY_THRESHOLD bytes is held in memory (an array, or a proto's raw_data: packed 4-bit
        weights) to the `spill_into` file, read back on demand like an input's payload; returns
        the bytes moved. What a pass produces then lives in the page cache, which the kernel can
        drop, not in the process: a 27 GB model's int8 weights (6.7 GB) were all held until the
        export before. No-op without `spill_into`."""
        if self._spill is None or self._spill.was_taken:
            return 0
        from ..graph_utils import collect_constants
        from .file_backed import FileBackedValues, spillable_proto

        moved, self._pending, batch = 0, 0, []
        for site in collect_constants(graph):
            if site.node is not None:
                continue  # Constant nodes are small; their attributes are written as they are
            spillable = spillable_proto(site.tensor)
            if spillable is None:
                continue
            proto, payload = spillable
            offset = self._spill.place(len(payload))
            batch.append((payload, offset))
            proto.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", SPILL_LOCATION), ("offset", str(offset)), ("length", str(len(payload)))):
                entry = proto.external_data.add()
                entry.key, entry.value = key, value
            site.tensor._values = FileBackedValues(proto, self)
            moved += len(payload)
        if batch:
            self._spill.write(batch)  # on the spill's writer thread, while the pass goes on
        return moved

    def wait_spilled(self, offset: int, timeout: float | None = None) -> bool:
        """Block until the spill file holds every payload placed below `offset` (spill.py's flush
        points); False without a spill file, or where it failed, closed or `timeout` passed."""
        return self._spill is not None and self._spill.wait_flushed(offset, timeout)

    def on_spill_flush(self, listener) -> bool:
        """`listener(offset)` on each flush point of the spill file (SpillFile.on_flush); False
        without one."""
        if self._spill is None:
            return False
        self._spill.on_flush(listener)
        return True

    def spill_file(self) -> int | None:
        """A handle on the spill file that the output's data file may take over
        (`SpillFile.adoptable`), or None."""
        return None if self._spill is None else self._spill.adoptable()

    def spill_taken(self) -> None:
        """The output's data file took the spill file over (`SpillFile.taken`)."""
        self._spill.taken()

    def read(self, location: str, offset: int, length: int, *, tensor: str | None = None) -> bytes | memoryview:
        """`length` bytes at `offset` of `location`; `tensor` names the reader in an error. A
        location from `hold` gives a view of the array's own bytes."""
        held = self._held.get(location)
        if held is not None:
            return held[offset:offset + length]
        data = os.pread(self._fd(location, tensor), length, offset)
        if len(data) != length:
            raise OSError(f"external data file {location} is shorter than the model says")
        return data

    def read_into(self, location: str, offset: int, buffer: memoryview, *, tensor: str | None = None) -> None:
        """Fill `buffer` (writable, bytes) from `offset` of `location`, with no copy in between."""
        fd, done, size = self._fd(location, tensor), 0, len(buffer)
        while done < size:
            n = os.preadv(fd, [buffer[done:]], offset + done)
            if n <= 0:
                raise OSError(f"external data file {location} is shorter than the model says")
            done += n

    def mappable(self, location: str, tensor: str | None = None) -> int | None:
        """A handle on the file `location` names where its bytes can be mapped (not a payload
        held in memory, nor the spill file, which grows as it is written), else None."""
        if location in self._held or location == SPILL_LOCATION:
            return None
        return self._fd(location, tensor)

    def fd_of(self, location: str) -> int | None:
        """An open handle on the file `location` names (for copying it in the kernel), or None
        for a payload held in memory (`hold`)."""
        if location in self._held:
            return None
        return self._fd(location, None)

    def _fd(self, location: str, tensor: str | None) -> int:
        if location == SPILL_LOCATION and self._spill is not None:
            return self._spill.fd()  # its bytes written before anything reads or copies them
        fd = self._fds.get(location)
        if fd is None:
            if location == self.model_file:
                file = self.base_dir / location
            else:
                what = f"tensor '{tensor}': external data location" if tensor else "external data location"
                file = confined(self.base_dir, location, what)
            fd = self._fds[location] = os.open(file, os.O_RDONLY)
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._held.clear()
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def __del__(self):
        self.close()


def complete_external_lengths(tensors, base_dir: Path) -> None:
    """Give every external reference a `length` (ONNX makes it optional: the rest of the file),
    so that everything downstream can rely on it."""
    for t in tensors:
        if t.data_location == onnx.TensorProto.EXTERNAL and not any(
            e.key == "length" and e.value for e in t.external_data
        ):
            info = {e.key: e.value for e in t.external_data}
            size = os.path.getsize(base_dir / info["location"]) - int(info.get("offset") or 0)
            entry = t.external_data.add()
            entry.key, entry.value = "length", str(size)


def materialize(model: onnx.ModelProto, files: ExternalFiles, tensors) -> None:
    """Read external payloads back into `tensors` (TensorProtos of `model`), in place."""
    for t in tensors:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        data = files.read(*external_ref(t), tensor=t.name)
        del t.external_data[:]
        t.ClearField("data_location")
        t.raw_data = bytes(data)


# the gs side's names, from their old home (PEP 562): file_backed.py imports onnx-graphsurgeon
_GS_SIDE = ("FileBackedValues", "held_payload", "payload_in_file", "MAP_FROM_BYTES", "MADV_POPULATE_READ")


def __getattr__(name: str):
    if name in _GS_SIDE:
        from . import file_backed

        return getattr(file_backed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
