"""A model's one data file copied into a staging folder beside the output on a thread, while the
caller works out whether the output is that copy: `shrink` of a model with nothing to merge
(staging.copy_with_data). The copy is most of that command's time (1.35 GB: the whole run but
for the interpreter's start); begun before the passes and onnxruntime's load check, it runs
while they do instead of after them. Where the output turns out to be a rewrite, `cancel`
stops it within a chunk and removes what was copied: the output is never touched before
`finish`, and nothing is left behind."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Callable

from ..errors import OutputError
from .lazy import read_model_skipping_weights
from .paths import confined, location_entries
from .staging import StagedModel

# bytes per sendfile call: how far a cancelled copy runs on (64 MB: a few tens of ms)
CHUNK = 64 << 20


class EarlyCopy:
    """`start` it; then `finish` (the copy complete, the .onnx written beside it, both moved into
    place) or `cancel` (stopped, the staging folder removed); cancel after finish does nothing."""

    def __init__(self, source: Path, target: Path, model, data: Path, staging: Path):
        self.target, self.model, self.staging = target, model, staging
        self.name = target.name + ".data"
        self.stop = threading.Event()
        self.error: OSError | None = None
        self.done = False
        self.thread = threading.Thread(target=self._copy, args=(data,), daemon=True, name="early-copy")
        self.thread.start()

    @classmethod
    def start(cls, source: str | os.PathLike, target: str | os.PathLike) -> EarlyCopy | None:
        """The copy of `source`'s one data file begun for the output `target`; None where the model
        names more than one data file, holds large payloads of its own, or anything about it
        fails here (the caller then writes as it would have: its errors are said there)."""
        source, target = Path(source), Path(target)
        try:
            model = read_model_skipping_weights(source)
            locations = {entry.value for _, entry in location_entries(model)}
            if len(locations) != 1 or source.name in locations:
                return None
            data = confined(source.parent, locations.pop(), "external data location")
            if not data.is_file():
                return None
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        except Exception:  # noqa: BLE001 - an unsafe location, a malformed model: said by the normal path
            return None
        return cls(source, target, model, data, staging)

    def _copy(self, data: Path) -> None:
        try:
            with open(data, "rb") as src, open(self.staging / self.name, "wb") as dst:
                size, offset = os.fstat(src.fileno()).st_size, 0
                while offset < size and not self.stop.is_set():
                    sent = os.sendfile(dst.fileno(), src.fileno(), offset, min(CHUNK, size - offset))
                    if not sent:
                        break
                    offset += sent
                if offset < size and not self.stop.is_set():  # the file shrank under us
                    raise OSError(f"{data} ended at {offset} of {size} bytes")
        except OSError as e:
            self.error = e

    def finish(self, before: Callable[[], object] | None = None) -> list[Path]:
        """Wait for the copy, write the .onnx naming it (`before` called first, as copy_with_data
        calls it) and move both into place: their paths."""
        if before is not None:
            before()
        self.thread.join()
        staged = StagedModel(self.target, self.staging)
        try:
            if self.error is not None:
                e = self.error
                raise OutputError(f"cannot write {self.target}: {e.strerror or e}") from e
            staged.names.append(self.name)
            for _, entry in location_entries(self.model):
                entry.value = self.name
            try:
                (self.staging / self.target.name).write_bytes(self.model.SerializeToString())
            except OSError as e:
                raise OutputError(f"cannot write {self.target}: {e.strerror or e}") from e
            staged.names.append(self.target.name)
            written = staged.commit()
            self.done = True
            return written
        finally:
            staged.discard()

    def cancel(self) -> None:
        """Stop the copy and remove what it wrote (nothing once `finish` returned)."""
        if self.done:
            return
        self.stop.set()
        self.thread.join()
        shutil.rmtree(self.staging, ignore_errors=True)
        self.done = True
