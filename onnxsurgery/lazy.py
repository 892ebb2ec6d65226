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

import mmap
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx_graphsurgeon.ir.tensor import LazyValues

LAZY_THRESHOLD = 4096


class _Malformed(Exception):
    pass


# -- protobuf wire format ---------------------------------------------------------------------

# Length-delimited fields to descend into, per message type (field numbers from onnx.proto).
_CHILDREN = {
    "model": {7: "graph"},                      # ModelProto.graph
    "graph": {1: "node", 5: "tensor"},          # GraphProto.node, .initializer
    "node": {5: "attr"},                        # NodeProto.attribute
    "attr": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph"},  # t, g, tensors, graphs
}
_RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 9, 13, 14  # TensorProto fields


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Malformed
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """Yield (field, wire_type, field_start, payload_start, field_end)."""
    pos = start
    while pos < end:
        key, p = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, q = _varint(buf, p)
        elif wire == 1:
            q = p + 8
        elif wire == 2:
            n, p = _varint(buf, p)
            q = p + n
        elif wire == 5:
            q = p + 4
        else:
            raise _Malformed
        if q > end or field == 0:
            raise _Malformed
        yield field, wire, pos, p, q
        pos = q


def _len_field(field: int, payload) -> bytes:
    return _encode_varint(field << 3 | 2) + _encode_varint(len(payload)) + bytes(payload)


def _rewrite(buf, start: int, end: int, kind: str, location: str) -> bytes | None:
    """The message in buf[start:end] with large raw_data turned into external references, or
    None when nothing inside changes (the caller then copies the original bytes)."""
    if kind == "tensor":
        return _rewrite_tensor(buf, start, end, location)
    children = _CHILDREN[kind]
    out: list = []
    last = start
    for field, wire, fstart, pstart, fend in _fields(buf, start, end):
        if wire == 2 and field in children:
            new = _rewrite(buf, pstart, fend, children[field], location)
            if new is not None:
                out.append(buf[last:fstart])
                out.append(_len_field(field, new))
                last = fend
    if not out:
        return None
    out.append(buf[last:end])
    return b"".join(out)


def _rewrite_tensor(buf, start: int, end: int, location: str) -> bytes | None:
    raw = None
    for field, wire, fstart, pstart, fend in _fields(buf, start, end):
        if field == _RAW_DATA and wire == 2:
            raw = (fstart, pstart, fend)
        elif field == _DATA_LOCATION and wire == 0:
            if _varint(buf, pstart)[0] == onnx.TensorProto.EXTERNAL:
                return None  # already external: keep its reference
    if raw is None or raw[2] - raw[1] < LAZY_THRESHOLD:
        return None
    entries = b"".join(
        _len_field(_EXTERNAL_DATA, _len_field(1, k.encode()) + _len_field(2, v.encode()))
        for k, v in (("location", location), ("offset", str(raw[1])),
                     ("length", str(raw[2] - raw[1])))
    )
    where = _encode_varint(_DATA_LOCATION << 3 | 0) + _encode_varint(onnx.TensorProto.EXTERNAL)
    return b"".join([buf[start:raw[0]], buf[raw[2]:end], entries, where])


def read_model_skipping_weights(path: Path) -> onnx.ModelProto:
    """Parse the .onnx at `path` with large tensor payloads left in the file (see module doc).

    Raises ValueError when the file is not a well-formed protobuf.
    """
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ValueError("empty file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            buf = memoryview(mm)
            try:
                stripped = _rewrite(buf, 0, len(buf), "model", path.name)
                if stripped is None:
                    stripped = bytes(buf)
            except (_Malformed, IndexError) as e:
                raise ValueError("malformed protobuf") from e
            finally:
                buf.release()
    return onnx.ModelProto.FromString(stripped)


# -- reading tensor bytes on demand -----------------------------------------------------------


class ExternalFiles:
    """Open handles on the files a model's external references point into."""

    def __init__(self, base_dir: Path):
        self.base_dir = base_dir
        self._fds: dict[str, int] = {}

    def read(self, location: str, offset: int, length: int) -> bytes:
        fd = self._fds.get(location)
        if fd is None:
            fd = self._fds[location] = os.open(self.base_dir / location, os.O_RDONLY)
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise OSError(f"external data file {location} is shorter than the model says")
        return data

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self):
        self.close()


def external_ref(t: onnx.TensorProto) -> tuple[str, int, int | None]:
    info = {e.key: e.value for e in t.external_data}
    length = info.get("length")
    return info["location"], int(info.get("offset", 0)), int(length) if length else None


class FileBackedValues(LazyValues):
    """gs lazy values whose bytes stay in a file until read."""

    def __init__(self, tensor: onnx.TensorProto, files: ExternalFiles):
        super().__init__(tensor)
        self.files = files
        self.location, self.offset, length = external_ref(tensor)
        if length is None:
            length = os.path.getsize(files.base_dir / self.location) - self.offset
        self.length = length

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        """Stored bytes [offset, offset + length) of the tensor (all of them by default)."""
        length = self.length - offset if length is None else length
        return self.files.read(self.location, self.offset + offset, length)

    def load(self) -> np.ndarray:
        t = _without_external(self.tensor)
        t.raw_data = self.read()
        return np.array(numpy_helper.to_array(t))


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
        location, offset, length = external_ref(t)
        if length is None:
            length = os.path.getsize(files.base_dir / location) - offset
        data = files.read(location, offset, length)
        del t.external_data[:]
        t.ClearField("data_location")
        t.raw_data = data
