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
