"""Constants as .npy files beside a model: write them, read them back as feeds, embed them.

Layout for an output `model.onnx` (defaults):
    model.onnx            the graph, with one input per moved constant
    model.npy/            one .npy file per moved constant
    model.npy.json        the manifest: input name -> file, dtype, shape, sha256

`load_feeds("model.onnx")` returns the arrays to feed, checked against the manifest: a missing
file, another dtype or shape, or a changed checksum is an error naming the file.

.npy has no bfloat16 (nor float8, nor 4-bit) dtype: numpy writes such an array as opaque
records (`|V2`) that nothing reads back as numbers. They are stored as unsigned integers of the
same width holding the raw bits, and the manifest entry says so (`"dtype": "bfloat16",
"stored_as": "uint16 bit patterns"`, with a top-level `"note"` on how to read them back);
`load_feeds` hands them back in their own type (ml_dtypes, which onnx uses for them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..errors import InputError, OutputError
from ..parallel import ordered_map
from .writer import copy_range
from .staging import write_atomic
from .paths import confined

MANIFEST_VERSION = 1
# ml_dtypes' types that .npy cannot describe, stored as their bits
BIT_PATTERN_DTYPES = frozenset({
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn", "int4", "uint4"})
BIT_PATTERN_NOTE = ("Entries with 'stored_as' hold the raw bits of a type .npy cannot describe, as unsigned "
                    "integers of the same width; read one back with np.load(file).view(ml_dtypes.<dtype>), "
                    "e.g. np.load(f).view(ml_dtypes.bfloat16) (4-bit types: one value per byte, low nibble).")


# npy's default selection (issue 57, item 8): every constant of at least 1 KB, the weights, as `info`
# lists them. Until then the default moved only the constants read more than once after merging
# (scs4onnx's npy mode, now --shared), which on real models, whose weights are each read once, moved
# nothing ("6.8 MB -> 6.8 MB", an empty folder) or a stray 8-byte constant.
DEFAULT_MIN_BYTES = 1024


def manifest_path(model_path: str | os.PathLike) -> Path:
    p = Path(model_path)
    return p.with_name(p.stem + ".npy.json")


def default_npy_dir(model_path: str | os.PathLike) -> Path:
    p = Path(model_path)
    return p.with_name(p.stem + ".npy")


def array_sha256(array: np.ndarray) -> str:
    """Of the array's bytes in C order; a contiguous one (a memory-mapped .npy) without a copy."""
    import hashlib  # here: only npy manifests need it, and its import loads OpenSSL (3-5 ms)

    contiguous = np.ascontiguousarray(array)
    digest = hashlib.sha256()
    flat = memoryview(contiguous.reshape(-1).view(np.uint8)) if contiguous.size else memoryview(b"")
    for start in range(0, len(flat), HASH_CHUNK):
        digest.update(flat[start:start + HASH_CHUNK])
    return digest.hexdigest()


HASH_CHUNK = 16 * 2**20


def _bits_dtype(itemsize: int) -> np.dtype:
    return np.dtype(f"<u{itemsize}")


def _from_bits(bits: np.ndarray, dtype_name: str) -> np.ndarray:
    """The raw bits read from a .npy as the ml_dtypes type they are."""
    import ml_dtypes  # onnx's own dependency for these types; loaded only when a model has them

    return bits.view(getattr(ml_dtypes, dtype_name))


def _file_name(name: str, used: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "tensor"
    candidate, i = base, 1
    while candidate.lower() in used:
        candidate, i = f"{base}_{i}", i + 1
    used.add(candidate.lower())
    return candidate + ".npy"


def write_arrays(arrays: dict, npy_dir: Path, manifest: Path) -> dict:
    """Write one .npy per array into `npy_dir` (replacing it whole) and return the manifest
    (not yet written). The folder is filled in a staging folder and renamed into place. Each
    value is an array, or a function returning one (`externalize`'s): read, written and let go
    one at a time."""
    from .staging import check_output_folder

    npy_dir = Path(npy_dir)
    check_output_folder(npy_dir.parent, "the .npy folder's parent")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{npy_dir.name}.", dir=npy_dir.parent))
    except OSError as e:
        raise OutputError(f"cannot write {npy_dir}: {e.strerror or e}") from e
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp's 0700 would make the shipped folder private
    entries = {}
    used: set[str] = set()
    def read_and_hash(item) -> tuple[np.ndarray | None, str]:
        value = item[1]
        if _in_file(value) is not None:  # copied in the kernel below; hashed here from the file
            return None, _file_sha256(*_in_file(value)[:3])
        array = value() if callable(value) else value
        return array, array_sha256(array)

    try:
        # a second thread reads and hashes the next array while this one writes (both let go of
        # the GIL): 1.6 s of sha256 and 1.0 s of reading beside 1.3 s of writing on a 1.6 GB model
        for (name, value), (array, digest) in ordered_map(read_and_hash, list(arrays.items()), size=lambda item: 1,
                                                          budget=2, workers=2):
            fname = _file_name(name, used)
            source = _in_file(value) if array is None else None
            if source is not None:
                _copy_npy(staging / fname, *source)
                entries[name] = {"file": os.path.relpath(npy_dir / fname, manifest.parent),
                                 "dtype": str(source[3]), "shape": list(source[4]), "sha256": digest}
                continue
            as_bits = array.dtype.name in BIT_PATTERN_DTYPES
            stored = array.view(_bits_dtype(array.dtype.itemsize)) if as_bits else array
            np.save(staging / fname, stored, allow_pickle=False)
            entries[name] = {
                "file": os.path.relpath(npy_dir / fname, manifest.parent),
                "dtype": str(array.dtype),
                "shape": list(array.shape),
                "sha256": digest,
            }
            if as_bits:
                entries[name]["stored_as"] = f"{stored.dtype.name} bit patterns"
            del array, stored
        if npy_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{npy_dir.name}.old.", dir=npy_dir.parent))
            os.replace(npy_dir, old / "x")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(staging, npy_dir)
    except OSError as e:
        raise OutputError(f"cannot write {npy_dir}: {e.strerror or e}") from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest: dict = {"version": MANIFEST_VERSION, "inputs": entries}
    if any("stored_as" in e for e in entries.values()):
        manifest["note"] = BIT_PATTERN_NOTE
    return manifest


def _in_file(value):
    """Where a moved constant's bytes sit in the input's file as numpy lays them out
    (`file_backed.payload_in_file`), or None (then it is read and written as an array)."""
    from .file_backed import payload_in_file  # here: the load check's manifest read needs no gs

    tensor = getattr(value, "tensor", None)
    return payload_in_file(tensor) if tensor is not None else None


def _file_sha256(fd: int, offset: int, length: int) -> str:
    """sha256 of `length` bytes at `offset` of an open file, read a chunk at a time."""
    import hashlib

    digest = hashlib.sha256()
    for start in range(0, length, HASH_CHUNK):
        digest.update(os.pread(fd, min(HASH_CHUNK, length - start), offset + start))
    return digest.hexdigest()


def _copy_npy(path: Path, fd: int, offset: int, length: int, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """A .npy of `shape` and `dtype` whose data are `length` bytes at `offset` of `fd`: the
    header written, the data copied in the kernel (copy_file_range, as `cp`; reading each
    array and writing it again ran npy at 0.18x `cp` on a 5.46 GB decoder; `writer.copy_range`),
    chunked where the platform or file system cannot."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                 "fortran_order": False, "shape": shape})
        f.flush()
        start = f.tell()
        done = copy_range(fd, f.fileno(), offset, start, length)
        if done < length:  # the rest through this process
            f.seek(start + done)
            while done < length:
                chunk = os.pread(fd, min(HASH_CHUNK, length - done), offset + done)
                if not chunk:
                    raise OSError("the input's data file is shorter than the model says")
                f.write(chunk)
                done += len(chunk)


def write_manifest(manifest: dict, path: Path) -> None:
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2) + "\n"))


def read_manifest(model_path: str | os.PathLike) -> dict | None:
    """The manifest beside `model_path`, or None when there is none."""
    path = manifest_path(model_path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        entries = data["inputs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"unreadable manifest {path}: {e}") from e
    if not isinstance(entries, dict):
        raise InputError(f"unreadable manifest {path}: 'inputs' is not an object")
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise InputError(f"unreadable manifest {path}: input '{name}' names no file")
    return entries


class NpyModel(os.PathLike):
    """A model written by `npy`, its manifest beside it, as `compare` hands it on: a session of
    it (`sessions.session`) takes its arrays as the initializers they were, as `run` gives them,
    and `--inputs` need not hold them (`samples.check_samples`). Anything else reads the path."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"NpyModel({str(self.path)!r})"

    @property
    def npy_names(self) -> frozenset[str]:
        """The graph inputs its arrays fill."""
        return frozenset(read_manifest(self.path) or {})

    def npy_arrays(self) -> dict[str, np.ndarray]:
        """Its arrays, checked against the manifest (`load_feeds`)."""
        return load_feeds(self.path)


def with_npy_arrays(model):
    """`model` as an NpyModel where it is a path with a manifest beside it, else as it is."""
    if isinstance(model, (str, os.PathLike)) and not isinstance(model, NpyModel) and Path(model).is_file() \
            and read_manifest(model) is not None:
        return NpyModel(model)
    return model


def load_feeds(model_path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The externalized arrays of `model_path`, by input name, each checked against the
    manifest (dtype, shape, sha256), memory-mapped read-only from their files. Empty when the
    model has no manifest. Every file must lie inside the manifest's folder (`paths.confined`):
    the manifest may come with an untrusted model."""
    entries = read_manifest(model_path)
    if entries is None:
        return {}
    base = manifest_path(model_path).parent
    # every file named, before any is read: the names come from the manifest (issue 38)
    resolved = {name: confined(base, entry["file"], f"input '{name}': npy manifest file")
                for name, entry in entries.items()}
    feeds = {}
    for name, entry in entries.items():
        file = base / entry["file"]  # as the manifest names it, for the messages
        if not resolved[name].is_file():
            raise InputError(f"missing weights file for input '{name}': {file}")
        try:  # mapped: its pages are the file's, not the process's (a model's weights at once)
            array = np.load(resolved[name], allow_pickle=False, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise InputError(f"cannot read {file}: {e}") from e
        if "stored_as" in entry:
            array = _bits_as(array, entry, file, name)
        if str(array.dtype) != entry["dtype"] or list(array.shape) != entry["shape"]:
            raise InputError(
                f"{file} holds {array.dtype}{list(array.shape)}, the manifest says "
                f"{entry['dtype']}{entry['shape']} for input '{name}'"
            )
        if array_sha256(array) != entry["sha256"]:
            raise InputError(f"{file} was changed: its checksum does not match the manifest")
        feeds[name] = array
    return feeds


def _bits_as(bits: np.ndarray, entry: dict, file: Path, name: str) -> np.ndarray:
    """An entry stored as bit patterns: the uint array read, viewed as the manifest's type."""
    dtype = entry.get("dtype")
    if dtype not in BIT_PATTERN_DTYPES:
        raise InputError(f"unreadable manifest entry for input '{name}': {dtype!r} is not stored as bit patterns")
    try:
        typed = _from_bits(bits, dtype)
    except ValueError:  # another width than the type's
        typed = None
    if bits.dtype.kind != "u" or typed is None or typed.shape != bits.shape:
        raise InputError(f"{file} holds {bits.dtype}{list(bits.shape)}, the manifest says {dtype}{entry.get('shape')} "
                         f"stored as {entry['stored_as']} for input '{name}'")
    return typed
