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
"""

from __future__ import annotations

import math
import statistics
import threading


def median_bounds(seen: list[float], n: int) -> tuple[float, float]:
    """The lowest and highest median over `n` samples of which `seen` are known (errors >= 0)."""
    rest = n - len(seen)
    return statistics.median(seen + [0.0] * rest), statistics.median(seen + [math.inf] * rest)


def decided(measured: list[float], data_free: list[float], n: int) -> bool | None:
    """True: the measured plan is kept whatever the samples not run give; False: the data-free plan
    is; None: not known yet (or a NaN seen: every run is then made, as before)."""
    if any(math.isnan(e) for e in measured + data_free):
        return None
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
