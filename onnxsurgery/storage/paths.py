"""Which files a model may have us open (issue 38).

A model names its external data by a `location` string, and an npy manifest names its arrays
by a `file` string. Both come from the file, so an untrusted model could name any file the
user can read (`/home/me/.ssh/id_rsa`, `../secret.bin`, a symlink out of its folder) and have
its bytes copied into an output or a report. onnx (>= 1.16) and onnxruntime refuse such
paths; `confined` is the one rule every reader here applies before it opens anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path, PureWindowsPath

import onnx

from ..errors import UnsafeLocationError


def confined(base_dir: str | Path, location: str, what: str) -> Path:
    """The file `location` names inside `base_dir`, resolved.

    Refused (UnsafeLocationError, "<what> '<location>' <why>"): an absolute path; a path that
    leads outside `base_dir` once `..` and symlinks are followed (a symlink in the folder to a
    file in the folder is fine); anything there that is not a regular file (a folder, a FIFO
    that would block, a device). A file that does not exist passes: the caller says it is
    missing, in its own words.
    """
    # A drive or a leading backslash is absolute to Windows, which onnxruntime also refuses
    if Path(location).is_absolute() or PureWindowsPath(location).anchor:
        raise UnsafeLocationError(f"{what} '{location}' is an absolute path")
    try:
        base = Path(base_dir).resolve()
        target = (base / location).resolve()  # symlinks first, then `..`, as the kernel does
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        raise UnsafeLocationError(f"{what} '{location}' is not a regular file") from None
    if not target.is_relative_to(base):
        raise UnsafeLocationError(f"{what} '{location}' points outside {base}")
    if target == base or (target.exists() and not target.is_file()):
        raise UnsafeLocationError(f"{what} '{location}' is not a regular file")
    return target


def check_external_locations(model: onnx.ModelProto, base_dir: str | Path, model_file: str) -> None:
    """Apply `confined` to every external data location in `model`, naming the first tensor
    that uses it. `model_file` (the .onnx's own name, where `lazy` points large inline payloads)
    is the file the user gave, and is not checked."""
    seen = {model_file}
    for name, location in external_locations(model):
        if location not in seen:
            confined(base_dir, location, f"tensor '{name}': external data location")
            seen.add(location)


def external_ref(t: onnx.TensorProto) -> tuple[str, int, int]:
    """(location, offset, length) of an external tensor; `length` must be present (see
    lazy.complete_external_lengths)."""
    info = {e.key: e.value for e in t.external_data}
    return info["location"], int(info.get("offset") or 0), int(info["length"])


def external_locations(model: onnx.ModelProto) -> Iterator[tuple[str, str]]:
    """(tensor name, location) of each external reference anywhere in `model`, breadth first:
    initializers, Constant nodes, subgraphs, function bodies, sparse tensors. A walk over every
    message rather than a list of the places tensors live: a place left out would be a way past
    the rule. Payloads are not strings or messages, so they cost nothing here."""
    yield from ((name, entry.value) for name, entry in location_entries(model))


def location_entries(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.StringStringEntryProto]]:
    """(tensor name, its `location` entry, which may be changed in place) of each external
    reference anywhere in `model`, as external_locations walks them."""
    pending: deque = deque([model])
    while pending:
        message = pending.popleft()
        if message.DESCRIPTOR is _TENSOR:
            if message.data_location == onnx.TensorProto.EXTERNAL:
                yield from ((message.name, e) for e in message.external_data if e.key == "location")
            continue
        for field, value in message.ListFields():
            # only into messages whose type can hold a tensor (_holds_tensors): a value info's
            # type and shape cannot, and were most of the walk (terrain_diffusion: 0.035 -> 0.007 s)
            if field.type == field.TYPE_MESSAGE and _holds_tensors(field.message_type):
                # protobuf 7 dropped FieldDescriptor.label for is_repeated
                repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
                pending.extend(value if repeated else (value,))


_TENSOR = onnx.TensorProto.DESCRIPTOR
_HOLDS: dict = {}  # message descriptor -> whether a TensorProto can be inside one (by the schema)


def _holds_tensors(descriptor) -> bool:
    """Whether a message of this type is a TensorProto or can hold one at any depth, read from the
    protobuf schema itself (not a list of places: a field onnx adds is followed as soon as it can
    hold one)."""
    known = _HOLDS.get(descriptor)
    if known is None:
        seen, todo, known = {descriptor}, [descriptor], descriptor is _TENSOR
        while todo and not known:
            for field in todo.pop().fields:
                inner = field.message_type if field.type == field.TYPE_MESSAGE else None
                known = known or inner is _TENSOR
                if inner is not None and inner not in seen:
                    seen.add(inner)
                    todo.append(inner)
        _HOLDS[descriptor] = known
    return known
