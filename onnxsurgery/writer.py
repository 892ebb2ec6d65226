"""Write a model whose tensor payloads may still sit in the input's files, without first
reading them into the ModelProto.

The model is serialised without those payloads (small), then the wire format is walked once
to plan the output: each tensor that refers to a payload in a file gets a `raw_data` field
whose bytes are copied straight from that file as the output is written; with external data,
each large payload goes to the .data file at a page-aligned offset instead. Every message
length is known from the plan before a byte is written, so memory stays at the size of the
graph without its weights, and the 2 GB protobuf limit is checked before writing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO, NamedTuple, Union

import onnx

from .lazy import (
    _CHILDREN,
    _DATA_LOCATION,
    _EXTERNAL_DATA,
    _RAW_DATA,
    ExternalFiles,
    _encode_varint,
    _fields,
    _len_field,
    _varint,
)

COPY_CHUNK = 16 * 2**20


class FileRef(NamedTuple):
    location: str
    offset: int
    length: int

    def __len__(self) -> int:  # so that plans can sum piece lengths alike
        return self.length


Piece = Union[bytes, memoryview, FileRef]


@dataclass
class ExternalPlan:
    """Where payloads go in the .data file: (payload, offset), page-aligned."""

    location: str
    threshold: int
    align: int
    entries: list[tuple[Piece, int]] = field(default_factory=list)
    size: int = 0

    def place(self, payload: Piece) -> int:
        offset = self.size + (-self.size % self.align)
        self.entries.append((payload, offset))
        self.size = offset + len(payload)
        return offset


def plan_model(buf: memoryview, external: ExternalPlan | None) -> tuple[list[Piece], int]:
    pieces = _plan(buf, 0, len(buf), "model", external)
    if pieces is None:
        pieces = [buf]
    return pieces, sum(len(p) for p in pieces)


def _plan(buf, start: int, end: int, kind: str, external: ExternalPlan | None) -> list[Piece] | None:
    if kind == "tensor":
        return _plan_tensor(buf, start, end, external)
    children = _CHILDREN[kind]
    out: list[Piece] = []
    last = start
    changed = False
    for fnum, wire, fstart, pstart, fend in _fields(buf, start, end):
        if wire == 2 and fnum in children:
            sub = _plan(buf, pstart, fend, children[fnum], external)
            if sub is not None:
                out.append(buf[last:fstart])
                out.append(_encode_varint(fnum << 3 | 2) + _encode_varint(sum(len(p) for p in sub)))
                out.extend(sub)
                last = fend
                changed = True
    if not changed:
        return None
    out.append(buf[last:end])
    return out


def _plan_tensor(buf, start: int, end: int, external: ExternalPlan | None) -> list[Piece] | None:
    kept: list[Piece] = []
    payload: Piece | None = None
    ref: dict[str, str] = {}
    is_external = False
    for fnum, wire, fstart, pstart, fend in _fields(buf, start, end):
        if fnum == _RAW_DATA and wire == 2:
            payload = buf[pstart:fend]
        elif fnum == _EXTERNAL_DATA and wire == 2:
            entry = {k: bytes(buf[p:q]).decode() for k, _, _, p, q in _fields(buf, pstart, fend)}
            ref[entry.get(1, "")] = entry.get(2, "")
        elif fnum == _DATA_LOCATION and wire == 0:
            is_external = _varint(buf, pstart)[0] == onnx.TensorProto.EXTERNAL
        else:
            kept.append(buf[fstart:fend])
    if is_external:
        payload = FileRef(ref["location"], int(ref.get("offset", 0) or 0), int(ref["length"]))
    if payload is None:
        return None
    if external is not None and len(payload) >= external.threshold:
        offset = external.place(payload)
        entries = b"".join(
            _len_field(_EXTERNAL_DATA, _len_field(1, k.encode()) + _len_field(2, v.encode()))
            for k, v in (("location", external.location), ("offset", str(offset)),
                         ("length", str(len(payload))))
        )
        where = _encode_varint(_DATA_LOCATION << 3) + _encode_varint(onnx.TensorProto.EXTERNAL)
        return [*kept, entries, where]
    if not is_external:
        return None  # inline payload stays where it is
    return [*kept, _encode_varint(_RAW_DATA << 3 | 2) + _encode_varint(len(payload)), payload]


def write_pieces(f: BinaryIO, pieces, files: ExternalFiles | None) -> None:
    for piece in pieces:
        if isinstance(piece, FileRef):
            if files is None:
                raise ValueError(f"tensor data in {piece.location} was never loaded")
            done = 0
            while done < piece.length:
                n = min(COPY_CHUNK, piece.length - done)
                f.write(files.read(piece.location, piece.offset + done, n))
                done += n
        else:
            f.write(piece)


def write_data_file(f: BinaryIO, plan: ExternalPlan, files: ExternalFiles | None) -> None:
    for payload, offset in plan.entries:
        f.seek(offset)
        write_pieces(f, [payload], files)
