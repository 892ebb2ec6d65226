"""Both --inputs candidates' runs where their files share a prefix (shared_prefix.py): the first
(measured) candidate runs whole, asked also for the values at the cut, and the second (data-free)
one runs only its suffix, fed those values. Split from measured_or_free.py (issue 58, inputs12).

The order of the runs follows what can stop them (median_race.py). The first FIRST samples run in
turn, the first candidate's then the second's, as the rule that keeps the data-free plan on them
alone asks: where it does (or the bounds already decide for it), the measured candidate runs no
further and the data-free one runs its remaining samples whole, its own file (capspot_siamese:
2 whole runs of the measured file and 2 suffix runs less than all of both; one of each where the
first sample alone decides), after the first sample again, whose whole run confirms its pieced
outputs (Built.confirm) in that session instead of a session of its own (issue 58, inputs17). Otherwise, as before:
the first candidate runs its remaining samples whole, then the second its suffix till the
measured plan is known to be kept, with all of the first's errors known (the fewest suffix runs).
"""

from __future__ import annotations

from pathlib import Path

from ..running.sessions import session
from .built import candidate_runs
from .median_race import FIRST, decided
from .shared_prefix import Suffix


def shared_runs(paths: list[Path], names: list[str], feeds: list[dict], scoring, made: tuple[list, list],
                largest: int, confirm: bool = True):
    """Both candidates' errors, the first run whole (unfolded, as verification runs it) and asked
    for the values at the cut too, the second only where it differs; None where the files do not
    cut so (the caller runs each whole), or are not one file each up to `largest` bytes (not loaded
    whole here, twice). `scoring`: measured_or_free._errors' judged and scored; `made`: each
    candidate's Built, last. `confirm` False (a dry run): pieced outputs are not confirmed, and the
    data-free file, where it runs its remaining samples whole, does not run the first again."""
    judged, scored = scoring
    if not all([p.name for p in path.parent.iterdir()] == [path.name] and path.stat().st_size <= largest
               for path in paths):
        return None
    suffix = Suffix.of(paths[0], paths[1])
    if suffix is None:
        return None
    asked = [name for name in suffix.cut if name not in names and not any(name in f for f in feeds)]
    n, early = len(feeds), (FIRST if len(feeds) > FIRST else 0)
    runs, handed, rest, mine, theirs, more, unfolded, again = [], [], [], [], [], [], True, None
    sessions: dict = {}

    def first(feed: dict) -> None:
        if "whole" not in sessions:
            sessions["whole"] = session(suffix.asking(asked), fold_constants=False, layout=True, beside=True)
        runs.append(dict(zip(names + asked, sessions["whole"].run(names + asked, feed))))
        handed.append({name: {**feed, **runs[-1]}[name] for name in suffix.cut})

    def second(values: dict) -> None:
        if "part" not in sessions:
            sessions["part"] = session(suffix.typed(values), fold_constants=False, layout=True, beside=True)
        rest.append(dict(zip(suffix.outputs, sessions["part"].run(suffix.outputs, values))))

    def choice():
        return decided(scored(_whole(names, runs), mine), scored(_pieced(names, runs, rest), theirs), n)

    try:
        lost = False
        for feed in feeds[:early]:  # in turn: the first samples may decide for the data-free plan alone
            first(feed)
            second(handed[-1])
            if choice() is False:  # the first alone may (median_race.clear_on_first)
                lost = True
                break
        early = len(runs) if lost else early
        if not lost:
            for feed in feeds[early:]:
                first(feed)
        sessions.pop("whole", None)
        if not lost:
            for values in handed[len(rest):]:  # till the measured plan is known to be kept
                if choice() is True:
                    break
                second(values)
        sessions.clear()
        if lost:  # the data-free candidate's remaining samples: its own file, whole; first the first
            # sample again, its pieced outputs' confirmation (Built.confirm) in this session, not one more
            more, unfolded = candidate_runs(paths[1], names, (feeds[:1] if confirm else []) + feeds[early:])
            again, more = (more[0], more[1:]) if confirm else (None, more)
    except Exception:  # noqa: BLE001 - onnxruntime's own types: each candidate whole, as before
        return None
    found = [judged(paths[0], made[0], _whole(names, runs), True, mine),
             judged(paths[1], made[1], _pieced(names, runs, rest) + more, unfolded, theirs)]
    for built in (made[0][-1], made[1][-1]):
        if built is not None and built.outputs is not None:  # confirmed if kept (Built.confirm)
            built.pieced = (names, feeds[0])
    kept = made[1][-1]
    if again is not None and kept is not None and kept.outputs is not None:
        kept.confirm(again)  # the data-free file's whole run on the first sample, made above
    return found


def _whole(names: list[str], runs: list[dict]) -> list[list]:
    """The first candidate's outputs."""
    return [[r[n] for n in names] for r in runs]


def _pieced(names: list[str], runs: list[dict], rest: list[dict]) -> list[list]:
    """The second candidate's outputs: its suffix's where it computes them, else the first's."""
    return [[s.get(n, r[n]) for n in names] for r, s in zip(runs, rest)]
