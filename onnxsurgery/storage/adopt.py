"""The output's data file made out of the spill file, not copied from it (`adopt_spill`).

A quantized weight is written once into the spill file beside the output (lazy.ExternalFiles.
offload), then copied into the output's data file: on a 1.35 GB decoder, int8 wrote 680 MB for
a 348 MB output, and the copy (copy_file_range) took 0.8-3.8 s of a 10 s command as the kernel
wrote the first 340 MB back meanwhile. Here the spill file itself becomes the data file: it is
given a name in the staging folder (linkat of its O_TMPFILE handle), and its payloads are moved
to the offsets the layout gives them by shifting the file's blocks, not its bytes: fallocate's
INSERT_RANGE opens a hole before a payload that must move up, COLLAPSE_RANGE takes out what lies
before one that must move down (Linux: ext4, xfs). Both need offsets in whole blocks, which the
spill's and the data file's page alignment (4096) give. The output is byte for byte the one a
copy writes: the gaps between payloads are punched back to zeros, and the other payloads (the
input's, those held in memory) are written into their places as before.

Blocks only shift forward in the file's order, so the payloads kept in place are those whose
order in the spill is the layout's: the heaviest such sequence. The others (the scales, spilled
beside their weights but laid out after them all: 1 MB of 348 MB on that decoder) are copied
aside first, into a nameless file, and copied into their places once the blocks have moved.
Where any step is refused before the spill file has changed (no O_TMPFILE, another file system,
no fallocate modes), the caller copies as before."""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from .kernel import fallocate_call
from .lazy import SPILL_LOCATION, ExternalFiles
from .writer import DataFileLayout, FileRef, copy_range

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_INSERT_RANGE = 0x20
# Payloads smaller than this are copied aside and back rather than kept in place: a shift of
# the blocks is a syscall and a walk over the file's extents past it, a copy of a scale a few KB
KEEP_FROM_BYTES = 256 << 10
MAX_SHIFTS = 4096  # more and the copy is the quicker (a model of many mid-size weights)
REFUSED = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EXDEV, errno.ENOENT, errno.EPERM, errno.EACCES)


def adopt_spill(layout: DataFileLayout, files: ExternalFiles | None, target: Path) -> DataFileLayout | None:
    """Make `target` (a new path) the data file `layout` describes, out of `files`' spill file;
    returns a layout of what is still to be written there (write_data_file), or None where the
    spill file cannot be taken over: nothing was changed then and `target` does not exist. Once
    taken, the spill is `files.spill_taken`: its payloads are no longer where it says."""
    fd = files.spill_file() if files is not None else None
    fallocate = fallocate_call()
    if fd is None or fallocate is None:
        return None
    block = os.fstat(fd).st_blksize
    refs = [(i, piece, offset) for i, (piece, offset) in enumerate(layout.entries)
            if isinstance(piece, FileRef) and piece.location == SPILL_LOCATION and piece.length]
    movable = [r for r in refs if r[1].offset % block == 0 and r[2] % block == 0 and r[1].length >= KEEP_FROM_BYTES]
    kept = _heaviest_in_order(movable)
    if sum(r[1].length for r in kept) * 2 < sum(r[1].length for r in refs) or _shifts(kept) > MAX_SHIFTS:
        return None  # mostly out of order, or in many pieces: a copy is as quick
    kept_ids = {r[0] for r in kept}
    aside = [r for r in refs if r[0] not in kept_ids]
    side = _copy_aside(fd, aside, target.parent) if aside else None
    try:
        if not _link(fd, target):
            return None
        if not _move_blocks(fd, kept, fallocate):
            os.unlink(target)
            return None
        files.spill_taken()
        end = 0
        for _, piece, offset in kept:  # the gaps zeros again, as a written file's are
            if offset > end:
                _call(fallocate, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, end, offset - end)
            end = offset + piece.length
        os.ftruncate(fd, end)  # what the spill held past the last payload kept
        position = 0
        for _, piece, offset in aside:
            if copy_range(side, fd, position, offset, piece.length) != piece.length:
                raise OSError(errno.EIO, "the spill's payloads could not be copied back")
            position += piece.length
    finally:
        if side is not None:
            os.close(side)
    rest = DataFileLayout(layout.location, layout.threshold, layout.align, size=layout.size)
    rest.entries = [(piece, offset) for i, (piece, offset) in enumerate(layout.entries)
                    if not (isinstance(piece, FileRef) and piece.location == SPILL_LOCATION and piece.length)]
    return rest


def _shifts(kept: list) -> int:
    """How many shifts of blocks `_move_blocks` makes for `kept`."""
    shifts, shift = 0, 0
    for _, piece, offset in kept:
        if piece.offset + shift != offset:
            shifts, shift = shifts + 1, offset - piece.offset
    return shifts


def _link(fd: int, target: Path) -> bool:
    """Give the nameless file `fd` the name `target`: linkat(AT_SYMLINK_FOLLOW) of its
    /proc/self/fd link, which os.link asks for only where given a folder's handle (else link(2),
    which names the /proc link itself: EXDEV). False where refused."""
    folder = os.open(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.link(f"/proc/self/fd/{fd}", target.name, dst_dir_fd=folder)
    except OSError as e:
        if e.errno in REFUSED:
            return False
        raise
    finally:
        os.close(folder)
    return True


def _heaviest_in_order(refs: list) -> list:
    """The sequence of `refs` (layout order) whose spill offsets rise, of the most bytes: a
    Fenwick tree of the best sum ending at each offset's rank, O(n log n) for thousands of weights."""
    if not refs:
        return []
    ranks = {o: k + 1 for k, o in enumerate(sorted(r[1].offset for r in refs))}
    tree = [(0, -1)] * (len(refs) + 1)  # (bytes, index of the last ref) per node
    best, back = [0] * len(refs), [-1] * len(refs)
    for j, (_, piece, _) in enumerate(refs):
        k, top = ranks[piece.offset] - 1, (0, -1)
        while k > 0:  # the best sequence ending below this offset
            top = max(top, tree[k])
            k -= k & -k
        best[j], back[j] = top[0] + piece.length, top[1]
        k = ranks[piece.offset]
        while k <= len(refs):
            tree[k] = max(tree[k], (best[j], j))
            k += k & -k
    j, chain = max(range(len(refs)), key=best.__getitem__), []
    while j >= 0:
        chain.append(refs[j])
        j = back[j]
    return chain[::-1]


def _copy_aside(fd: int, aside: list, folder: Path) -> int:
    """The payloads `aside` copied from the spill file, one after another, into a new nameless
    file (in the kernel: no memory), read back once the spill file's blocks have moved."""
    try:
        side = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):
        import tempfile

        side, name = tempfile.mkstemp(prefix=".onnxsurgery-aside.", dir=folder)
        os.unlink(name)
    try:
        position = 0
        for _, piece, _ in aside:
            if copy_range(fd, side, piece.offset, position, piece.length) != piece.length:
                raise OSError(errno.EIO, "the spill file is shorter than its payloads")
            position += piece.length
    except BaseException:
        os.close(side)
        raise
    return side


def _move_blocks(fd: int, kept: list, fallocate) -> bool:
    """Shift the spill file's blocks so that each payload of `kept` (rising in both orders) sits
    at its layout offset. False where the first shift is refused (the file unchanged)."""
    shift, changed = 0, False
    for _, piece, offset in kept:
        now = piece.offset + shift  # where the payload is after the shifts before it
        if now == offset:
            continue
        if now < offset:  # a hole before it; what follows moves up with it
            mode, start, length = FALLOC_FL_INSERT_RANGE, now, offset - now
        else:  # what lies before it, after the payload kept before it, taken out
            mode, start, length = FALLOC_FL_COLLAPSE_RANGE, offset, now - offset
        if fallocate(fd, mode, start, length) != 0:
            err = ctypes.get_errno()
            if not changed and err in REFUSED:
                return False
            raise OSError(err, f"cannot move the spill file's blocks: {os.strerror(err)}")
        changed = True
        shift += offset - now
    return True


def _call(fallocate, fd: int, mode: int, start: int, length: int) -> None:
    if fallocate(fd, mode, start, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
