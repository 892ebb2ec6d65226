"""One weight rounded one way, once per `quant --inputs` check (issue 58, measured14).

With --inputs, api/measured_or_free.py makes two plans of the same model (the measured one and
the data-free one, on two threads) and builds both: four passes over separate graphs of the
same file, whose stages quantize the same weight the same way again and again (the channel-axis
stage rounds each axis in both plans, the lean stage both forms, each build the kept form).
Within `sharing`, `rounded` hands back the integers and scales of the first time: keyed on the
weight's name, every argument of the rounding and the sha256 of the values (and of what they are
divided by first): a graph's copy of the weight is another array with the same bytes, so the
result is the same by construction. Each array is hashed once (0.5 s per GB; holding the values
instead to compare them raised ddddocr_det's peak 288 -> 346 MB). A rounding
another thread is making meanwhile is waited for, not made twice. Not shared: rounding with
per-element importance or given clipping picks (4 bits: those differ between the plans).

Each caller gets its own shallow copy (Quantized's fields are set after rounding: the `scaled`
lowering's input scales, `remembered`, and `sums`, which weight_error takes only against the
array they were measured on, so a copy's point at the caller's own values). The arrays are
shared and read only. Held until the outermost `sharing` closes, up to `budget` bytes of
integers and scales; past that, nothing new is kept.
"""

from __future__ import annotations

import copy
import hashlib
import os
import tempfile
import threading
import weakref
from contextlib import contextmanager
from typing import Callable

import numpy as np

from .rounding import Quantized

_LOCK = threading.Lock()
_STATE = {"open": 0, "budget": 0, "held": 0}
_KEPT: dict = {}  # key -> _Entry
_DIGESTS: dict = {}  # id(array) -> (a weak reference to it, its digest)
# arguments that only shortcut a search whose result they are (the same integers either way)
_SHORTCUTS = ("ranges",)


class _Entry:
    def __init__(self):
        self.done = threading.Event()
        self.qt: Quantized | None = None


@contextmanager
def sharing(budget: int):
    """Within it, `rounded` shares each rounding, up to `budget` bytes held (module doc)."""
    with _LOCK:
        _STATE["open"] += 1
        _STATE["budget"] = max(_STATE["budget"], budget)
    try:
        yield
    finally:
        with _LOCK:
            _STATE["open"] -= 1
            if not _STATE["open"]:
                _KEPT.clear()
                _DIGESTS.clear()
                _STATE["budget"] = _STATE["held"] = 0


def rounded(name: str, values: np.ndarray, divisor: np.ndarray | None, way: tuple, args: dict,
            make: Callable[[], Quantized]) -> Quantized:
    """make(), or a copy of what it gave for the same `name`, `way` and `args` and equal `values`
    and `divisor` (what the values are divided by first, or None)."""
    key = _key(name, values, divisor, way, args)
    if key is None:
        return make()
    with _LOCK:
        entry = _KEPT.get(key)
        mine = entry is None and _STATE["held"] < _STATE["budget"]
        if mine:
            entry = _KEPT[key] = _Entry()
    if entry is None:
        return make()
    if not mine:
        entry.done.wait()
        if entry.qt is None:
            return make()
        return _copy(entry.qt, values)
    try:
        qt = make()
    except BaseException:
        with _LOCK:
            _KEPT.pop(key, None)
        entry.done.set()
        raise
    entry.qt = copy.copy(qt)  # the caller sets fields of its own
    with _LOCK:
        _STATE["held"] += qt.q.nbytes + qt.scale.nbytes
    entry.done.set()
    return qt


def _digest(a: np.ndarray | None) -> bytes | None:
    """sha256 of `a`'s shape, type and bytes, once per array object."""
    if a is None:
        return None
    a = np.asarray(a)
    with _LOCK:
        known = _DIGESTS.get(id(a))
    if known is not None and known[0]() is a:
        return known[1]
    found = hashlib.sha256(repr((a.shape, a.dtype.str)).encode())
    found.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
    with _LOCK:
        _DIGESTS[id(a)] = weakref.ref(a), found.digest()
    return found.digest()


def _key(name: str, values: np.ndarray, divisor: np.ndarray | None, way: tuple, args: dict) -> tuple | None:
    if not _STATE["open"] or any(args.get(k) is not None for k in ("importance", "clip_picks", "known_picks")):
        return None
    rest = tuple(sorted((k, v) for k, v in args.items() if k not in _SHORTCUTS and not isinstance(v, np.ndarray)))
    if len(rest) != sum(k not in _SHORTCUTS for k in args):  # an array argument: not keyed
        return None
    return name, _digest(values), _digest(divisor), way, rest


def _copy(qt: Quantized, values: np.ndarray) -> Quantized:
    mine = copy.copy(qt)
    mine.remembered = mine.input_scale = mine.input_axis = None
    if qt.sums is not None:
        mine.sums = (weakref.ref(values), *qt.sums[1:])
    return mine


# The plan's whole-weight roundings, for the pass of the same graph (issue 58, oneread15): the
# plan reads every weight whole (its NaN check, the input-side scales), then the pass read it
# again, from disk where the model is larger than the page cache. Where the pass is to follow
# (`holding`, opened around plan and pass alike: passes/quantize_weights.py), the plan rounds the
# whole weight in the form it measured best on that read and holds its integers, scales and
# error here, keyed on the constant's identity and every argument of the rounding; the pass
# takes them instead of reading the weight, and reads only the weights whose settled form
# differs (a global rule changed it) or that did not fit the budget (the first ones are held:
# the page cache keeps the last).
# 1 GB of integers: issue 48's bound is 1 GB + 4x the largest tensor (dec-l4 int8 holds 338 MB)
HELD_BYTES = 1 << 30
# Held only for weights of at least this share of the machine's memory, which the page cache may
# not keep until the pass. Where it keeps them, the pass's second read costs no disk and holding
# cost CPU: dec-l4 (1.35 GB; 24 GB here), 5 alternating pairs at load 20-27, main -> held:
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
_HOLD = {"open": 0, "budget": 0, "held": 0}
_HELD: dict = {}  # key -> (what its ids are of, held so that they stay theirs; Quantized; error; bytes)


_SPILL: dict = {"folder": None, "file": None}  # past the budget: a nameless file in `folder`
_SPILL_LOCK = threading.Lock()
_SPILLED = ("q", "scale", "zero_point")  # what the pass's lowering takes; the rest is dropped


@contextmanager
def holding(budget: int, folder=None):
    """Within it, `hold` keeps up to `budget` bytes of the plan's roundings for `take`; past it,
    where `folder` is given (the output's), their integers wait in a nameless file there, read
    back by `take` (a quarter of a float32 weight's bytes written and read, not the weight again)."""
    with _LOCK:
        _HOLD["open"] += 1
        _HOLD["budget"] = max(_HOLD["budget"], budget)
        if budget and folder is not None:
            _SPILL["folder"] = folder
    try:
        yield
    finally:
        with _LOCK:
            _HOLD["open"] -= 1
            if not _HOLD["open"]:
                _HELD.clear()
                _HOLD["budget"] = _HOLD["held"] = 0
                _SPILL["folder"] = None
                if _SPILL["file"] is not None:
                    _SPILL["file"].close()
                    _SPILL["file"] = None


def hold_budget(weight_bytes: int, four_bit: bool = False) -> int:
    """`holding`'s budget for a model of `weight_bytes` float weights (HOLD_FROM_MEMORY_SHARE);
    none for a 4-bit quantization (HOLD_FOUR_BIT)."""
    if four_bit and not HOLD_FOUR_BIT:
        return 0
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # unknown: as if the weights did not fit
        return HELD_BYTES
    return HELD_BYTES if weight_bytes >= HOLD_FROM_MEMORY_SHARE * memory else 0


def holds_room(nbytes: int) -> bool:
    """Whether `hold` would keep `nbytes` more (checked before rounding, which then pays)."""
    with _LOCK:
        return bool(_HOLD["open"]) and (_HOLD["held"] + nbytes <= _HOLD["budget"] or _SPILL["folder"] is not None)


def hold(owners, key: tuple, qt: Quantized, error: dict) -> bool:
    """Keep `qt` (a whole weight rounded as `key` says) and its error for `take`; `owners`: the
    objects whose ids `key` holds, held with it."""
    nbytes = _nbytes(qt)
    with _LOCK:
        if not _HOLD["open"] or key in _HELD:
            return False
        if _HOLD["held"] + nbytes <= _HOLD["budget"]:
            _HELD[key] = owners, qt, dict(error), nbytes
            _HOLD["held"] += nbytes
            return True
        folder = _SPILL["folder"]
    if folder is None:
        return False
    spilled = _spill(qt, folder)
    with _LOCK:
        if not _HOLD["open"]:
            return False
        _HELD[key] = owners, spilled, dict(error), 0
    return True


def is_held(key: tuple) -> bool:
    with _LOCK:
        return key in _HELD


def take(key: tuple) -> tuple[Quantized, dict] | None:
    """(Quantized, its error) that `hold` kept for `key`, handed over once, or None."""
    with _LOCK:
        found = _HELD.pop(key, None)
        if found is None:
            return None
        _HOLD["held"] -= found[3]
    qt = found[1]
    return (_read_back(*qt) if isinstance(qt, tuple) else qt), found[2]


def release() -> None:
    """Drops what the pass did not take (weights whose form a global rule changed)."""
    with _LOCK:
        _HELD.clear()
        _HOLD["held"] = 0


def _nbytes(qt: Quantized) -> int:
    """The bytes of every array `qt` holds (its groups' ranges are 1/16 of a weight in blocks)."""
    arrays = (qt.q, qt.scale, qt.zero_point, qt.input_scale, qt.clip_picks, *(qt.ranges or ()))
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


def _spill(qt: Quantized, folder) -> tuple:
    """(qt without its arrays, where each of _SPILLED went in the spill file)."""
    with _SPILL_LOCK:
        if _SPILL["file"] is None:
            _SPILL["file"] = tempfile.TemporaryFile(dir=folder)  # unlinked: nothing left behind
        fd = _SPILL["file"].fileno()
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


def _read_back(bare: Quantized, places: dict) -> Quantized:
    qt = copy.copy(bare)
    fd = _SPILL["file"].fileno()
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
