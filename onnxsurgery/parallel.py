"""Work on several weights at once, within a memory budget.

numpy's rounding, reductions and `os.preadv` release the GIL, so two threads keep two cores
busy; a process pool would copy every weight. Results come back in order, and the items in
flight together never exceed `budget` bytes (one item alone may). The callers give the largest
weight's size as the budget: it runs alone, smaller ones run together while they add up to no
more, so the working set stays what the largest tensor alone needs, as issue 48's bound asks
(with twice the largest as the budget, int4 of a 27 GB decoder peaked at 5.0 GB: two 524 MB
tables measured at once, clip search and all).
Quantizing a 5.46 GB decoder read each weight, measured it and rounded it one after the other
on one of the machine's two cores.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WORKERS = min(4, os.cpu_count() or 1)


def ordered_map(fn: Callable[[T], R], items: Iterable[T], *, size: Callable[[T], int],
                budget: int, workers: int = WORKERS) -> Iterator[tuple[T, R]]:
    """(item, fn(item)) for each item, in order, computed on `workers` threads with at most
    `budget` bytes of items (`size`) in flight, but always at least one."""
    if workers <= 1:
        for item in items:
            yield item, fn(item)
        return
    with ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        in_flight = 0
        source = iter(items)
        waiting = next(source, None)
        done = waiting is None
        while pending or not done:
            while not done and len(pending) < workers and (not pending or in_flight + size(waiting) <= budget):
                pending.append((waiting, pool.submit(fn, waiting)))
                in_flight += size(waiting)
                waiting = next(source, None)
                done = waiting is None
            item, future = pending.popleft()
            in_flight -= size(item)
            yield item, future.result()


def last_first_map(fn: Callable[[T], R], items: Iterable[T], *, size: Callable[[T], int],
                   budget: int, workers: int = WORKERS) -> Iterator[tuple[T, R]]:
    """ordered_map's (item, fn(item)) in `items`' order, but computed last item first (issue 58):
    where a later walk reads the same items first to last and the page cache is smaller than
    them, it then starts on what this walk read last, still cached, instead of on what the cache
    dropped first. Every result is held until the walk ends: for small results only."""
    done = list(ordered_map(fn, list(items)[::-1], size=size, budget=budget, workers=workers))
    yield from reversed(done)

