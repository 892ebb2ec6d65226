"""Open a model without reading its weights.

`onnx.load` parses the whole file: the file's bytes plus a parsed copy, about twice the model
in memory, and most of the run time on a weight-heavy model. Here a small scanner walks the
protobuf wire format of the .onnx, and every tensor whose `raw_data` is at least
`LAZY_THRESHOLD` bytes is rewritten into a standard external-data reference (location = the
.onnx itself, offset, length). Only the small remainder is parsed by protobuf. Tensors that
already live in external data files keep their references.

Constants then read their bytes on demand (`FileBackedValues.read`), so a pass that only needs
a fingerprint reads a few samples, and a tensor that is dropped is never read at all.
`materialize` puts the bytes back into a result model before it is returned or saved.
"""

from __future__ import annotations

import math
import mmap
import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx_graphsurgeon.exporters.onnx_exporter import dtype_to_onnx
from onnx_graphsurgeon.ir.tensor import LazyValues

from .paths import confined
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

        moved, self._pending, batch = 0, 0, []
        for site in collect_constants(graph):
            if site.node is not None:
                continue  # Constant nodes are small; their attributes are written as they are
            spillable = _spillable_proto(site.tensor)
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


def external_ref(t: onnx.TensorProto) -> tuple[str, int, int]:
    """(location, offset, length) of an external tensor; `length` must be present (see
    `complete_external_lengths`)."""
    info = {e.key: e.value for e in t.external_data}
    return info["location"], int(info.get("offset") or 0), int(info["length"])


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


class FileBackedValues(LazyValues):
    """gs lazy values whose bytes stay in a file until read."""

    def __init__(self, tensor: onnx.TensorProto, files: ExternalFiles):
        super().__init__(tensor)
        self.files = files
        self.location, self.offset, self.length = external_ref(tensor)

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """Stored bytes [offset, offset + length) of the tensor (all of them by default)."""
        length = self.length - offset if length is None else length
        return self.files.read(self.location, self.offset + offset, length, tensor=self.tensor.name)

    def read_into(self, buffer: memoryview, offset: int = 0) -> None:
        """Stored bytes [offset, offset + len(buffer)) of the tensor into `buffer` (writable
        bytes), with no new object in between: a caller comparing many payloads reuses one."""
        held = self.files._held.get(self.location)
        if held is not None:
            buffer[:] = held[self.offset + offset:self.offset + offset + len(buffer)]
            return
        self.files.read_into(self.location, self.offset + offset, buffer, tensor=self.tensor.name)

    def load(self) -> np.ndarray:
        dtype = _DIRECT_DTYPES.get(self.tensor.data_type)
        shape = tuple(self.tensor.dims)
        if dtype is not None and self.length == dtype.itemsize * math.prod(shape):
            array = self._mapped(dtype, shape) if self.length >= MAP_FROM_BYTES else None
            if array is not None:
                return array
            # straight from the file into the array: the copy through a TensorProto and
            # numpy_helper took 14 of 94 s quantizing a 2.7 GB model (each weight read 3 times)
            array = np.empty(shape, dtype)
            self.files.read_into(self.location, self.offset, memoryview(array.reshape(-1).view(np.uint8)),
                                 tensor=self.tensor.name)
            return array
        t = _without_external(self.tensor)
        t.raw_data = self.read()
        return np.array(numpy_helper.to_array(t))


    def _mapped(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
        """The values as an array over a private mapping of the file (MAP_FROM_BYTES), or None
        where it cannot be one (a payload held in memory or in the spill file, a misaligned
        offset, a file shorter than the reference: read_into says so in its words)."""
        fd = self.files.mappable(self.location, self.tensor.name)
        if fd is None:
            return None
        start = self.offset - self.offset % mmap.ALLOCATIONGRANULARITY
        delta = self.offset - start
        if delta % dtype.itemsize:
            return None
        try:
            mapping = mmap.mmap(fd, delta + self.length, access=mmap.ACCESS_COPY, offset=start)
        except (OSError, ValueError):
            return None
        try:  # its page table filled in one call rather than a fault per 64 KB as numpy reads it
            mapping.madvise(MADV_POPULATE_READ)
        except (OSError, ValueError, AttributeError):  # before Linux 5.14; elsewhere; no madvise (Windows)
            pass
        return np.frombuffer(mapping, dtype, math.prod(shape), delta).reshape(shape)


# A payload of at least MAP_FROM_BYTES is loaded as an array over a private (copy-on-write)
# mapping of its file, not read into new memory: its pages are the page cache's own until
# something writes to them, as a copy would be. Reading the weights into fresh arrays was
# about a third of `quant --no-verify`'s system time on a 1.2 GB decoder (each weight read
# twice: the plan's measurements and the pass; 2.4 GB copied, each page of the copies faulted
# in and zeroed first). Those pages count as the file's, not as the process's anonymous memory.
# Every output is staged and renamed into place (staging.py), so no pass truncates a file whose
# pages an array still maps; another program truncating the input meanwhile would be a SIGBUS.
MAP_FROM_BYTES = 1 << 20
MADV_POPULATE_READ = 22  # Linux's; Python 3.11's mmap does not name it


# Types whose stored bytes are numpy's own layout (ONNX stores little-endian): read as they are.
# The others (bfloat16, float8, 4-bit, strings) go through numpy_helper's conversions.
_DIRECT_DTYPES = {} if sys.byteorder != "little" else {
    getattr(onnx.TensorProto, name): np.dtype(dtype) for name, dtype in (
        ("FLOAT", np.float32), ("DOUBLE", np.float64), ("FLOAT16", np.float16), ("INT8", np.int8),
        ("UINT8", np.uint8), ("INT16", np.int16), ("UINT16", np.uint16), ("INT32", np.int32),
        ("UINT32", np.uint32), ("INT64", np.int64), ("UINT64", np.uint64), ("BOOL", np.bool_))}


def _without_external(t: onnx.TensorProto) -> onnx.TensorProto:
    copy = onnx.TensorProto()
    copy.CopyFrom(t)
    del copy.external_data[:]
    copy.ClearField("data_location")  # proto2: an explicit default would still be written
    return copy


def materialize(model: onnx.ModelProto, files: ExternalFiles, tensors) -> None:
    """Read external payloads back into `tensors` (TensorProtos of `model`), in place."""
    for t in tensors:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        data = files.read(*external_ref(t), tensor=t.name)
        del t.external_data[:]
        t.ClearField("data_location")
        t.raw_data = bytes(data)


def held_payload(t) -> np.ndarray | None:
    """What `ExternalFiles.hold` may hold for the gs Constant `t`: its in-memory numpy values of
    at least LAZY_THRESHOLD bytes, stored as they are (no dtype conversion on export), as a flat
    C-contiguous array; None for any other (gs's own export then)."""
    values = t._values
    if not isinstance(values, np.ndarray) or values.nbytes < LAZY_THRESHOLD:
        return None
    if t.export_dtype is not None and dtype_to_onnx(t.export_dtype) != dtype_to_onnx(t.dtype):
        return None
    if values.dtype.newbyteorder("<") != values.dtype or values.dtype.kind not in "biuf":
        return None  # big-endian or an object / string array: gs's own conversion
    return np.ascontiguousarray(values).reshape(-1)


def _spillable_proto(t) -> tuple[onnx.TensorProto, memoryview] | None:
    """For `ExternalFiles.offload`: a new TensorProto naming `t` (no payload: an upb message keeps
    the bytes of a field it clears until it is freed itself, so a copy of one with raw_data held
    a packed 4-bit weight for good: int4 of a 27 GB decoder grew to 5 GB) and the payload to
    write; None for a payload small, already in a file, or not stored as it is."""
    values = t._values
    if isinstance(values, FileBackedValues):
        return None
    if isinstance(values, LazyValues):
        proto = values.tensor
        if isinstance(proto, onnx.SparseTensorProto):
            return None  # gs's SparseValues: written back as a sparse initializer
        if proto.data_location == onnx.TensorProto.EXTERNAL or len(proto.raw_data) < LAZY_THRESHOLD:
            return None
        if proto.segment.ByteSize() or proto.external_data:
            return None  # an unusual layout: left as it is
        return (onnx.TensorProto(name=t.name, data_type=proto.data_type, dims=list(proto.dims)),
                memoryview(proto.raw_data))
    payload = held_payload(t)
    if payload is None:
        return None
    return (onnx.TensorProto(name=t.name, data_type=int(dtype_to_onnx(t.dtype)), dims=list(t.shape)),
            memoryview(payload).cast("B"))


def payload_in_file(t) -> tuple[int, int, int, np.dtype, tuple[int, ...]] | None:
    """(handle, offset, length, numpy dtype, shape) where the gs Constant `t`'s bytes sit in a
    file exactly as numpy lays the array out (little-endian, C order, a type numpy has), so a
    copy of them is the array's bytes; None otherwise (in memory, or another layout)."""
    values = t._values
    if not isinstance(values, FileBackedValues):
        return None
    dtype = _DIRECT_DTYPES.get(values.tensor.data_type)
    shape = tuple(values.tensor.dims)
    if dtype is None or values.length != dtype.itemsize * math.prod(shape):
        return None
    fd = values.files.fd_of(values.location)
    return None if fd is None else (fd, values.offset, values.length, dtype, shape)
