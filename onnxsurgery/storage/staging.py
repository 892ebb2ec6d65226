"""Writing a model: staged beside its destination, checked, then put in place, with the
external data files it replaces cleaned up.

- `stage_model` writes the .onnx (and, with external data, one `<output name>.data` file)
  into a staging folder beside the destination; `StagedModel.commit` moves them into place.
  `save_model` does both.
- Data files that the file being replaced referred to and the new one does not (an
  `--in-place` rewrite of a model with a `.data` file, an output rewritten without
  `--external-data`) are removed once the new files are in place, unless another model in the
  folder still refers to them. Only plain files inside the folder are removed: the locations
  come from a file that may be untrusted (`paths.confined`).
- `copy_file` and `write_atomic` write single files atomically; `copy_with_data` a model and
  its one data file.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import onnx

from ..errors import OutputError, UnsafeLocationError
from .adopt import adopt_spill
from .direct_copy import copy_large_file
from .lazy import ExternalFiles, read_model_skipping_weights
from .skim import read_structure
from .paths import confined, external_locations, location_entries
from .writer import DataFileLayout, layout_model, write_data_file, write_pieces

log = logging.getLogger(__name__)

PROTOBUF_LIMIT = 2**31 - 1
EXTERNAL_DATA_THRESHOLD = 1024  # tensors smaller than this stay inside the .onnx
EXTERNAL_DATA_ALIGN = 4096  # page-aligned offsets, so the runtime can memory-map tensors


def check_output_path(input_path: str | os.PathLike | None, output: str | os.PathLike,
                      in_place: bool) -> Path:
    out = Path(output)
    if input_path is not None and not in_place:
        try:
            same = out.resolve() == Path(input_path).resolve()
        except OSError:
            same = False
        if same:
            raise OutputError(f"output is the input file ({out}); pass --in-place to overwrite it")
    if out.is_dir():
        raise OutputError(f"output is a directory: {out}")
    check_output_folder(out.parent)
    return out


def check_output_folder(folder: Path, what: str = "output folder") -> None:
    """`folder` can take a new file: it exists, is a folder (not a file a path runs through) and
    lets us write there. Checked before any work, so that a command refuses in one line rather
    than failing at its first temporary file. (Run as root, the permission check passes and the
    write itself fails; `errors.from_os_error` then says it in the same words.)"""
    if not folder.exists():
        raise OutputError(f"{what} does not exist: {folder}")
    if not folder.is_dir():
        raise OutputError(f"{what} is not a folder: {folder} is a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write to {folder}: permission denied")




def save_model(model: onnx.ModelProto, path: str | os.PathLike, *, external_data: bool = False,
               files: ExternalFiles | None = None, lists=None) -> list[Path]:
    """Write `model` atomically; returns the files written. See `stage_model`, whose callers
    check the written file before it replaces anything."""
    with stage_model(model, path, external_data=external_data, files=files, lists=lists) as staged:
        return staged.commit()


def stage_model(model: onnx.ModelProto, path: str | os.PathLike, *, external_data: bool = False,
                files: ExternalFiles | None = None, take_spill: bool = False, lists=None) -> StagedModel:
    """Write `model` into a staging directory beside `path`; nothing is replaced until
    `commit()`. Use it as a context manager: whatever was not committed is removed.

    Payloads that `model` still refers to in the input's files (`files`, see `lazy`) are copied
    straight from there. With `external_data`, or automatically when the result would pass
    the 2 GB protobuf limit, tensors of at least 1 KB go to one `<name>.data` file beside the
    model, page-aligned so that runtimes can memory-map them. Once staged, `model` is no longer
    needed: callers can drop it (and their graph) before checking the staged file.

    `take_spill`: this is the last use of `files`' spill file (the workspace is closed next);
    the .data file may be made out of it rather than copied from it (adopt.py), after which
    nothing can read the payloads `files` spilled.

    `lists` (held_lists.HeldLists): the model was exported with placeholders for long list
    attributes, written here from the protos it holds.
    """
    path = Path(path)
    buf = memoryview(model.SerializeToString())
    data_name = path.name + ".data"
    plain = lists.rewrite if lists else None
    layout = DataFileLayout(data_name, EXTERNAL_DATA_THRESHOLD, EXTERNAL_DATA_ALIGN) if external_data else None
    pieces, total = layout_model(buf, layout, plain)
    if layout is None and total > PROTOBUF_LIMIT:
        layout = DataFileLayout(data_name, EXTERNAL_DATA_THRESHOLD, EXTERNAL_DATA_ALIGN)
        pieces, total = layout_model(buf, layout, plain)
    if total > PROTOBUF_LIMIT:
        raise OutputError(f"the graph alone is over 2 GB ({total} bytes) even with external data")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as e:
        raise OutputError(f"cannot write to {path.parent}: {e.strerror or e}") from e
    staged = StagedModel(path, staging)
    try:
        if layout is not None:
            rest = adopt_spill(layout, files, staging / data_name) if take_spill else None
            with open(staging / data_name, "wb" if rest is None else "r+b") as f:
                write_data_file(f, layout if rest is None else rest, files)
            staged.names.append(data_name)
        with open(staging / path.name, "wb") as f:
            write_pieces(f, pieces, files)
        staged.names.append(path.name)
    except BaseException as e:
        staged.discard()
        if isinstance(e, OSError):
            raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
        raise
    return staged


class StagedModel:
    """A model written beside its destination but not yet in place (see `stage_model`)."""

    def __init__(self, target: Path, staging: Path):
        self.target, self.staging = target, staging
        self.names: list[str] = []  # the .data file first: the model never refers to a missing one

    @property
    def path(self) -> Path:
        """The staged .onnx, complete and loadable."""
        return self.staging / self.target.name

    def commit(self) -> list[Path]:
        """Move the staged files into place; returns their final paths. Data files the
        replaced model referred to and the new one does not are then removed
        (`remove_replaced_data`)."""
        before = data_files_of(self.target)
        try:
            for name in self.names:
                os.replace(self.staging / name, self.target.parent / name)
        except OSError as e:
            raise OutputError(f"cannot write {self.target}: {e.strerror or e}") from e
        remove_replaced_data(self.target, before, set(self.names))
        return [self.target.parent / name for name in self.names]

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> StagedModel:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def copy_file(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copy a file atomically (a no-op when both are the same file); a model it replaces
    leaves no data file behind (`remove_replaced_data`)."""
    source, target = Path(source), Path(target)
    if target.exists() and source.samefile(target):
        return
    before = data_files_of(target)
    write_atomic(target, lambda tmp: copy_large_file(source, tmp))  # direct_copy.py
    remove_replaced_data(target, before, data_files_of(target))


def copy_with_data(source: str | os.PathLike, target: str | os.PathLike,
                   before: Callable[[], object] | None = None) -> list[Path] | None:
    """A model whose weights are all in one data file, copied with it: the data file as it is
    (its offsets kept) as `<target name>.data`, and the .onnx as it is but for the locations,
    which name that file. None where the model names more than one data file or holds large
    payloads of its own. What a re-export would not keep: the nodes' order. A re-export sorts
    them, and onnxruntime's optimizer can compute a graph differently once sorted (isnet_fp16
    with a data file, whose float16 converter appended its Casts last: 2.7e-4 apart). `before`
    is called once the copy is known to apply, before anything is written (shrink: the workspace
    closed, the check run)."""
    source, target = Path(source), Path(target)
    model = read_model_skipping_weights(source)
    entries = list(location_entries(model))
    locations = {entry.value for _, entry in entries}
    if len(locations) != 1 or source.name in locations:
        return None
    data = confined(source.parent, locations.pop(), "external data location")
    if before is not None:
        before()
    name = target.name + ".data"
    for _, entry in entries:
        entry.value = name
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as e:
        raise OutputError(f"cannot write to {target.parent}: {e.strerror or e}") from e
    with StagedModel(target, staging) as staged:
        try:
            copy_large_file(data, staging / name)  # page cache left out of the writing (direct_copy.py)
            staged.names.append(name)
            (staging / target.name).write_bytes(model.SerializeToString())
            staged.names.append(target.name)
        except OSError as e:
            raise OutputError(f"cannot write {target}: {e.strerror or e}") from e
        return staged.commit()


def write_atomic(target: str | os.PathLike, fill: Callable[[Path], object]) -> None:
    """Have `fill` write a temporary file beside `target`, then rename it into place."""
    target = Path(target)
    tmp = _temp_beside(target)
    try:
        fill(tmp)
        os.replace(tmp, target)
    except OSError as e:
        raise OutputError(f"cannot write {target}: {e.strerror or e}") from e
    finally:
        if tmp.exists():
            tmp.unlink()


def _temp_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(name, 0o666 & ~umask)  # mkstemp makes 0600; outputs get the usual permissions
    return Path(name)


def data_files_of(model_path: Path) -> set[str]:
    """The external data locations the model at `model_path` refers to (not itself); empty
    when there is no such file or it is not a model."""
    if not model_path.is_file():
        return set()
    try:
        model = read_structure(model_path)
    except (OSError, ValueError):
        return set()
    return {location for _, location in external_locations(model)} - {model_path.name}


def remove_replaced_data(target: Path, before: set[str], now: set[str]) -> list[Path]:
    """Remove the data files in `before` (what the model replaced at `target` referred to) that
    are not in `now` (what the new one refers to) and that no other .onnx in the folder refers
    to. Skipped, never raised: a location outside the folder or through a symlink, and a file
    that cannot be removed (the result is in place already). Returns the files removed."""
    orphans = before - now - {target.name}
    folder = target.parent
    if orphans:
        for sibling in folder.glob("*.onnx"):
            if sibling.name != target.name:
                orphans -= data_files_of(sibling)
    removed = []
    for location in sorted(orphans):
        path = folder / location
        try:
            if confined(folder, location, "") != path.resolve() or path.is_symlink() or not path.is_file():
                continue
            path.unlink()
        except (UnsafeLocationError, OSError) as e:
            log.info("left %s in place: %s", path, e)
            continue
        removed.append(path)
        log.info("removed %s: %s no longer refers to it", path, target.name)
    return removed
