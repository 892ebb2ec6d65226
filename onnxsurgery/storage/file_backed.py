"""The gs side of lazy.py: gs Constants whose values stay in their file until read
(`FileBackedValues`), and what the writer and the spill ask of a Constant's payload. Apart from
lazy.py so that a command with no graph (`shrink`'s direct path) loads no onnx-graphsurgeon."""

from __future__ import annotations

import math
import mmap
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnx_graphsurgeon.exporters.onnx_exporter import dtype_to_onnx
from onnx_graphsurgeon.ir.tensor import LazyValues

from .paths import external_ref
from .skim import LAZY_THRESHOLD


class FileBackedValues(LazyValues):
    """gs lazy values whose bytes stay in a file until read."""

    def __init__(self, tensor: onnx.TensorProto, files):  # files: lazy.ExternalFiles (no import: lazy imports this)
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


def spillable_proto(t) -> tuple[onnx.TensorProto, memoryview] | None:
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
