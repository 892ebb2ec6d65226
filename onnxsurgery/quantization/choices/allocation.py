"""An error budget or a size budget spread over the weights: each weight is stored as int4,
int8, float16 or float32, whichever the budget affords it, cheapest error per byte first.

What a weight costs in each format is measured, not guessed: its output error with that weight
alone quantized (the caller, api/budget.py, measures it in onnxruntime on the verification
inputs), and the bytes the format stores (quant.estimates). Errors of separate weights add up
roughly as squares (independent rounding noise), so an allocation's predicted error is
sqrt(sum of squares); float16 is counted as free of error (its relative rounding, 2^-11, is
~100x below int8's) and float32 is exact. The caller verifies the allocation in onnxruntime and
tightens it if the prediction was short.

The search is greedy on the marginal rate: from the smallest allocation, repeatedly take the one
step (one weight to a larger format) that removes the most squared error per byte added, until
the error budget is met (`for_error`) or no step fits the size budget (`for_size`); and again
from each uniform allocation and from each format of the largest weights fixed first
(`_starts`), keeping the best allocation."""

from __future__ import annotations

from dataclasses import dataclass, field

FORMATS = ("int4", "int8", "float16", "float32")  # smallest first


@dataclass
class WeightCosts:
    """One weight: bytes stored and output error (the weight alone) per format it can take."""

    name: str
    bytes: dict[str, int]
    error: dict[str, float] = field(default_factory=dict)

    def formats(self) -> list[str]:
        return sorted(self.bytes, key=lambda f: (self.bytes[f], FORMATS.index(f)))


@dataclass
class Allocation:
    """A format for each weight, the bytes they store and the output error predicted."""

    formats: dict[str, str]  # weight -> format
    bytes: int  # of the weights allocated
    predicted_error: float

    def names(self, fmt: str) -> list[str]:
        return sorted(n for n, f in self.formats.items() if f == fmt)


def _allocation(weights: list[WeightCosts], formats: dict[str, str]) -> Allocation:
    by_name = {w.name: w for w in weights}
    squared = sum(by_name[n].error.get(f, 0.0) ** 2 for n, f in formats.items())
    return Allocation(dict(formats), sum(by_name[n].bytes[f] for n, f in formats.items()), squared ** 0.5)


def _steps(weights: list[WeightCosts], formats: dict[str, str]):
    """(squared error removed per byte added, bytes added, weight, format) for every one-weight step up."""
    for w in weights:
        now = formats[w.name]
        for fmt in w.formats():
            added = w.bytes[fmt] - w.bytes[now]
            removed = w.error.get(now, 0.0) ** 2 - w.error.get(fmt, 0.0) ** 2
            if added > 0 and removed > 0:
                yield removed / added, added, w.name, fmt


def _grow(weights: list[WeightCosts], done, room=None, start: dict[str, str] | None = None) -> Allocation:
    formats = {w.name: w.formats()[0] for w in weights} | (start or {})
    while not done(_allocation(weights, formats)):
        spent = _allocation(weights, formats).bytes
        steps = [s for s in _steps(weights, formats) if room is None or spent + s[1] <= room]
        if not steps:
            break
        _, _, name, fmt = max(steps)
        formats[name] = fmt
    return _allocation(weights, formats)


# Greedy by rate alone can spend the room on many small steps and leave none for the one large
# weight whose step matters most (ddddocr: its 8210x1024 Gemm stayed int4 while 21 small weights
# went float16, 0.036 against 0.012 with the Gemm at int8 in the same size). So the allocation is
# also grown from each uniform allocation and from each format of the LARGEST_FIRST largest
# weights fixed first, and the best one kept (the classic repair of greedy knapsack: compare
# with the best single large item).
LARGEST_FIRST = 8


def _starts(weights: list[WeightCosts]):
    """Formats fixed before growing (None: the smallest allocation)."""
    yield None
    for fmt in FORMATS[1:]:
        yield uniform(weights, fmt).formats
    for w in sorted(weights, key=lambda w: -max(w.bytes.values()))[:LARGEST_FIRST]:
        for fmt in w.formats()[1:]:
            yield {w.name: fmt}


def uniform(weights: list[WeightCosts], fmt: str) -> Allocation:
    """Every weight in `fmt` (or, where it cannot take it, its largest format)."""
    return _allocation(weights, {w.name: fmt if fmt in w.bytes else w.formats()[-1] for w in weights})


def for_error(weights: list[WeightCosts], target: float) -> Allocation:
    """The smallest allocation whose predicted output error is within `target` (or the most
    accurate allocation, if none is)."""
    allocations = [_grow(weights, lambda a: a.predicted_error <= target, start=s) for s in _starts(weights)]
    meeting = [p for p in allocations if p.predicted_error <= target]
    if meeting:
        return min(meeting, key=lambda p: (p.bytes, p.predicted_error))
    return min(allocations, key=lambda p: (p.predicted_error, p.bytes))


def for_size(weights: list[WeightCosts], max_bytes: int) -> Allocation:
    """The allocation with the smallest predicted error whose weights fit in `max_bytes` (or the
    smallest allocation, if none does)."""
    allocations = [_grow(weights, lambda a: False, room=max_bytes, start=s) for s in _starts(weights)]
    fitting = [p for p in allocations if p.bytes <= max_bytes]
    if fitting:
        return min(fitting, key=lambda p: (p.predicted_error, p.bytes))
    return allocations[0]
