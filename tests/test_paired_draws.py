"""bench/paired_draws.py's tally: on how many draws ours errs no more than onnx-shrink-ray (a tie
counts for ours), the medians of each file's errors, and the changed plan's counts where given."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import paired_draws  # noqa: E402


def test_tally_counts_ties_for_ours_and_gives_medians():
    line = paired_draws.tally([(0.1, 0.2), (0.3, 0.3), (0.5, 0.4)])
    assert line.startswith("ours errs no more than shrink-ray on 2 of 3 draws")
    assert line.endswith("medians 0.300000 / 0.300000")


def test_tally_with_a_changed_plan():
    line = paired_draws.tally([(0.2, 0.1, 0.1), (0.2, 0.3, 0.25), (0.1, 0.2, 0.3)])
    assert "ours errs no more than shrink-ray on 2 of 3" in line
    assert line.endswith("changed errs no more than shrink-ray on 2, than ours on 1")


def test_tally_with_two_changed_plans_numbers_them():
    line = paired_draws.tally([(0.2, 0.1, 0.1, 0.3), (0.2, 0.3, 0.25, 0.1), (0.1, 0.2, 0.3, 0.1)])
    assert "changed1 errs no more than shrink-ray on 2, than ours on 1" in line
    assert line.endswith("changed2 errs no more than shrink-ray on 2, than ours on 2")
