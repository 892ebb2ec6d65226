"""The plan's whole-weight roundings, held for the pass of the same graph (issue 58, oneread15).

The plan reads every weight whole (its NaN check, the input-side scales), then the pass read it
again, from disk where the model is larger than the page cache. Where the pass is to follow, the
quantize pass makes one `HeldRoundings` and hands it to the plan and to apply: lean.py's and
symmetry.py's measurements round the whole weight in the form they measured best on their read
and `hold` its integers, scales and error, keyed on the constant's identity and every argument of
the rounding (quantize.keep_whole); the pass `take`s them instead of reading the weight, and reads
only the weights whose settled form differs (a global rule changed it) or that did not fit the
budget (the first ones are held: the page cache keeps the last). Past the budget, where a folder
is given (the output's), the integers wait in a nameless file there and are read back as the
pass comes to them. The object is the state: nothing is kept at module level, and `close`
drops it all.
"""

from __future__ import annotations

import copy
import os
import tempfile
import threading

import numpy as np

from ..parallel import last_first_map, ordered_map
from .rounding import Quantized

# 1 GB of integers: issue 48's bound is 1 GB + 4x the largest tensor (dec-l4 int8 holds 338 MB)
HELD_BYTES = 1 << 30
# Held only for weights of at least this share of the memory the page cache may use, which it
# may not keep until the pass. Where it keeps them, the pass's second read costs no disk and
# holding cost CPU: dec-l4 (1.35 GB; 24 GB here), 5 alternating pairs at load 20-27, main -> held:
# `--no-verify` int8 2.49 -> 2.80 s CPU (pair ratio 1.14), int4 2.90 -> 3.30 s (1.13), verified
# 1.04-1.06x (the held integers' fresh pages, the rounding moved onto the plan's two workers).
# With a page cache of half the file (bench/cold_reads.py --cache-bytes) holding read it 1.23x
# (int8) and 1.61x (int4) against main's 2.07x and 2.61x.
HOLD_FROM_MEMORY_SHARE = 0.5
# 4-bit is not held: on the 27 GB decoder (cold, quiet, one run each) int4 verified took 99.2 and
# 106.5 s held against 92.1 and 92.8 s not (132.8/142.0 s CPU against 121.8/128.7), 2.01-2.05 reads
# against 1.86-2.12: its plan's whole-weight roundings cost more CPU than the read they save. int8
# `--no-verify` held: 60.2 and 69.7 s, 1.84-2.09 reads, against 67.6 s and 2.43 not
HOLD_FOUR_BIT = False
# what the pass's lowering takes of a spilled rounding; the rest is dropped
_SPILLED = ("q", "scale", "zero_point")
# cgroup v2's and v1's memory limits: the page cache of a process in a cgroup counts against it
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def cache_memory() -> int | None:
    """The memory this process's page cache can use: the machine's (sysconf), or its cgroup's
    limit where one is set and lower; None where neither is known."""
    try:
        found = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        found = None
    for path in CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) or none: no limit of its own
            limit = int(text)
            found = limit if found is None else min(found, limit)  # v1's unlimited is a huge number
        break
    return found


def hold_budget(weight_bytes: int, four_bit: bool = False, memory: int | None = None) -> int:
    """`HeldRoundings`' budget for a model of `weight_bytes` float weights (HOLD_FROM_MEMORY_SHARE
    of `memory`, by default cache_memory()); none for a 4-bit quantization (HOLD_FOUR_BIT)."""
    if four_bit and not HOLD_FOUR_BIT:
        return 0
    return HELD_BYTES if outgrows_cache(weight_bytes, memory) else 0


def outgrows_cache(weight_bytes: int, memory: int | None = None) -> bool:
    """Whether `weight_bytes` of float weights are at least HOLD_FROM_MEMORY_SHARE of `memory` (by
    default cache_memory(); unknown: as if they were), which the page cache may not keep."""
    memory = cache_memory() if memory is None else memory
    return memory is None or weight_bytes >= HOLD_FROM_MEMORY_SHARE * memory


def measuring_walk(held: HeldRoundings | None):
    """parallel's map for the plan's measurements of whole weights (lean.py, symmetry.py). Where
    nothing is held the pass reads every weight again, first to last: the plan then walks them
    last first (last_first_map), so that the pass starts on what a page cache smaller than the
    weights kept (dec-l4, cache of half its file, int4 `--no-verify`: 1.84-2.01 -> 1.52 reads).
    Where the plan holds its roundings the pass reads (almost) none again, and the plan walks
    first to last beside the reference's run, which reads in that order too and shares its read
    (walked last first, held int8 verified read 1.39 -> 1.70 with 2/3 of the file cached).
    Only where the weights outgrow the page cache (`outgrown`, as hold_budget's gate): where it
    keeps them the order saves no read, and verified int8 of dec-l4 took 1.04x the CPU walked last
    first (9 alternating pairs; the plan alone 0.96-1.01x)."""
    walk = held is not None and held.outgrown and not held.budget
    return last_first_map if walk else ordered_map


class HeldRoundings:
    """Up to `budget` bytes of the plan's roundings held for `take`; past it, where `folder` is
    given, their integers in a nameless file there (a quarter of a float32 weight's bytes written
    and read, not the weight again). A context manager: `close` on the way out."""

    def __init__(self, budget: int, folder=None, outgrown: bool = False):
        self.budget = budget
        self.outgrown = outgrown  # the weights outgrow the page cache (outgrows_cache): measuring_walk
        self.folder = folder if budget else None
        self.held = 0
        self._kept: dict = {}  # key -> (what its ids are of, held so that they stay theirs; Quantized; error; bytes)
        self._lock = threading.Lock()
        self._spill = None  # the nameless file, made on the first rounding past the budget
        self._spill_lock = threading.Lock()

    def __enter__(self) -> HeldRoundings:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._kept.clear()
            self.held, self.budget, self.folder = 0, 0, None
        with self._spill_lock:
            if self._spill is not None:
                self._spill.close()
                self._spill = None

    def has_room(self, nbytes: int) -> bool:
        """Whether `hold` would keep `nbytes` more (checked before rounding, which then pays)."""
        with self._lock:
            return self.held + nbytes <= self.budget or self.folder is not None

    def hold(self, owners, key: tuple, qt: Quantized, error: dict) -> bool:
        """Keep `qt` (a whole weight rounded as `key` says) and its error for `take`; `owners`:
        the objects whose ids `key` holds, held with it."""
        nbytes = _nbytes(qt)
        with self._lock:
            if not self.budget or key in self._kept:
                return False
            if self.held + nbytes <= self.budget:
                self._kept[key] = owners, qt, dict(error), nbytes
                self.held += nbytes
                return True
            folder = self.folder
        if folder is None:
            return False
        spilled = self._spilled(qt, folder)
        with self._lock:
            if not self.budget:  # closed meanwhile
                return False
            self._kept[key] = owners, spilled, dict(error), 0
        return True

    def is_held(self, key: tuple) -> bool:
        with self._lock:
            return key in self._kept

    def take(self, key: tuple) -> tuple[Quantized, dict] | None:
        """(Quantized, its error) that `hold` kept for `key`, handed over once, or None."""
        with self._lock:
            found = self._kept.pop(key, None)
            if found is None:
                return None
            self.held -= found[3]
        qt = found[1]
        return (self._read_back(*qt) if isinstance(qt, tuple) else qt), found[2]

    def release(self) -> None:
        """Drops what the pass did not take (weights whose form a global rule changed)."""
        with self._lock:
            self._kept.clear()
            self.held = 0

    def _spilled(self, qt: Quantized, folder) -> tuple:
        """(qt without its arrays, where each of _SPILLED went in the spill file)."""
        with self._spill_lock:
            if self._spill is None:
                self._spill = tempfile.TemporaryFile(dir=folder)  # unlinked: nothing left behind
            fd = self._spill.fileno()
            places = {}
            for name in _SPILLED:
                a = getattr(qt, name)
                if a is None:
                    continue
                a = np.ascontiguousarray(a)
                offset = os.lseek(fd, 0, os.SEEK_END)
                view, done = memoryview(a.reshape(-1).view(np.uint8)), 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], offset + done)
                places[name] = offset, a.dtype, a.shape
        bare = copy.copy(qt)
        bare.q = bare.scale = bare.zero_point = None
        bare.ranges = bare.clip_picks = bare.sums = bare.remembered = None
        return bare, places

    def _read_back(self, bare: Quantized, places: dict) -> Quantized:
        qt = copy.copy(bare)
        fd = self._spill.fileno()
        for name, (offset, dtype, shape) in places.items():
            a = np.empty(shape, dtype)
            view, done = memoryview(a.reshape(-1).view(np.uint8)), 0
            while done < len(view):
                n = os.preadv(fd, [view[done:]], offset + done)
                if not n:
                    raise OSError("the held roundings' spill file ended early")
                done += n
            setattr(qt, name, a)
        return qt


def _nbytes(qt: Quantized) -> int:
    """The bytes of every array `qt` holds (its groups' ranges are 1/16 of a weight in blocks)."""
    arrays = (qt.q, qt.scale, qt.zero_point, qt.input_scale, qt.clip_picks, *(qt.ranges or ()))
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
