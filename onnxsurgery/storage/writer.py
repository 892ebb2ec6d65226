"""Write a model whose tensor payloads may still sit in the input's files, without first
reading them into the ModelProto.

The model is serialised without those payloads (small), then the wire format is walked once
to lay out the output: each tensor that refers to a payload in a file gets a `raw_data` field
whose bytes are copied straight from that file as the output is written; with external data,
each large payload goes to the .data file at a page-aligned offset instead. Every message
length is known from the layout before a byte is written, so memory stays at the size of the
graph without its weights, and the 2 GB protobuf limit is checked before writing.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import BinaryIO, NamedTuple, Union

from .lazy import ExternalFiles
from .wire import (
    DATA_LOCATION,
    EXTERNAL,
    EXTERNAL_DATA,
    RAW_DATA,
    external_fields,
    fields,
    len_field_header,
    rewrite_tensors,
    varint,
)

COPY_CHUNK = 16 * 2**20


class FileRef(NamedTuple):
    location: str
    offset: int
    length: int

    def __len__(self) -> int:  # so that a layout sums piece lengths alike
        return self.length


Piece = Union[bytes, memoryview, FileRef]


@dataclass
class DataFileLayout:
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


def layout_model(buf: memoryview, external: DataFileLayout | None, plain=None) -> tuple[list[Piece], int]:
    """The serialised model `buf` as the pieces to write, and their total length: payloads left
    in the input's files as FileRefs, and with `external`, large payloads placed in the .data file.
    `plain`: a rewrite of attributes that hold no tensor (held_lists.HeldLists.rewrite)."""
    pieces = rewrite_tensors(buf, lambda b, s, e: _layout_tensor(b, s, e, external), plain=plain)
    if pieces is None:
        pieces = [buf]
    return pieces, sum(len(p) for p in pieces)


def _layout_tensor(buf, start: int, end: int, external: DataFileLayout | None) -> list[Piece] | None:
    kept: list[Piece] = []
    payload: Piece | None = None
    ref: dict[str, str] = {}
    is_external = False
    for fnum, wire, fstart, pstart, fend in fields(buf, start, end):
        if fnum == RAW_DATA and wire == 2:
            payload = buf[pstart:fend]
        elif fnum == EXTERNAL_DATA and wire == 2:
            entry = {k: bytes(buf[p:q]).decode() for k, _, _, p, q in fields(buf, pstart, fend)}
            ref[entry.get(1, "")] = entry.get(2, "")
        elif fnum == DATA_LOCATION and wire == 0:
            is_external = varint(buf, pstart)[0] == EXTERNAL
        else:
            kept.append(buf[fstart:fend])
    if is_external:
        payload = FileRef(ref["location"], int(ref.get("offset") or 0), int(ref["length"]))
    if payload is None:
        return None
    if external is not None and len(payload) >= external.threshold:
        offset = external.place(payload)
        return [*kept, external_fields(external.location, offset, len(payload))]
    if not is_external:
        return None  # inline payload stays where it is
    return [*kept, len_field_header(RAW_DATA, len(payload)), payload]


def write_pieces(f: BinaryIO, pieces, files: ExternalFiles | None) -> None:
    for piece in pieces:
        if isinstance(piece, FileRef):
            if files is None:
                raise ValueError(f"tensor data in {piece.location} was never loaded")
            if _copy_in_kernel(f, piece, files):
                continue
            done = 0
            while done < piece.length:
                n = min(COPY_CHUNK, piece.length - done)
                f.write(files.read(piece.location, piece.offset + done, n))
                done += n
        elif hasattr(piece, "bytes"):  # held_lists.AttributePiece: serialized now, one at a time
            f.write(piece.bytes())
        else:
            f.write(piece)


def write_data_file(f: BinaryIO, layout: DataFileLayout, files: ExternalFiles | None) -> None:
    for payload, offset in layout.entries:
        f.seek(offset)
        write_pieces(f, [payload], files)


def _copy_in_kernel(f: BinaryIO, piece: FileRef, files: ExternalFiles) -> bool:
    """Copy `piece` from its file into `f` at `f`'s position in the kernel (`copy_range`); False
    where nothing could be (a payload held in memory, no copy_file_range): the caller copies in
    chunks."""
    source = files.fd_of(piece.location)
    if source is None or piece.length == 0:
        return False
    f.flush()
    start = f.tell()
    done = copy_range(source, f.fileno(), piece.offset, start, piece.length)
    if done == 0:
        return False
    if done < piece.length:
        raise OSError(f"external data file {piece.location} is shorter than the model says")
    f.seek(start + piece.length)
    return True


def copy_range(source: int, target: int, source_offset: int, target_offset: int, length: int) -> int:
    """Copy `length` bytes between two open files with copy_file_range, the bytes never passing
    through this process (as `cp` copies: 4.0 s for 5.46 GB here, where reading and writing
    16 MB chunks wrote at a quarter of that). Returns the bytes copied: fewer where the source
    ends early, 0 where the platform or file system cannot (the caller then copies itself)."""
    if not hasattr(os, "copy_file_range"):
        return 0
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(source, target, length - done, source_offset + done, target_offset + done)
            if n == 0:
                break
            done += n
    except OSError as e:
        if done == 0 and e.errno in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
            return 0
        raise
    return done
