"""The thirteenth round's zoo inputs where they need no model: the seizure detector's spectrogram
columns (zoo/ieeg.py) as brainmaze's preprocess_input computes them, the seal crops' and flipped
lines' shapes and labels, tune and report drawn apart."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def test_ieeg_columns_are_100_bins_every_half_second_each_bin_z_scored():
    pytest.importorskip("scipy")
    from zoo import ieeg

    x = ieeg.spectrogram_columns(ieeg.ieeg_window(np.random.default_rng(0)))
    assert x.shape == (1, 100, 2 * ieeg.SECONDS - 1) and x.dtype == np.float32
    assert np.allclose(x.mean(axis=2), 0, atol=1e-4) and np.allclose(x.std(axis=2), 1, atol=1e-3)


def test_ieeg_seizure_raises_the_low_bins_where_it_is():
    rng = np.random.default_rng(3)
    pytest.importorskip("scipy")
    from zoo import ieeg

    x = ieeg.spectrogram_columns(ieeg.ieeg_window(rng))[0]
    low = x[2:10].mean(axis=0)  # 2-9 Hz: the discharge's band
    assert low.max() > 2 and (low > 0.5).sum() >= 2 * 30  # at least 30 s of it, over the rest


def test_ieeg_tune_and_report_windows_differ():
    pytest.importorskip("scipy")
    from zoo import ieeg

    tune, report = ieeg.ieeg_seizure_windows(None, 0, 1), ieeg.ieeg_seizure_windows(None, 1000, 1)
    assert not np.allclose(tune[0]["x"], report[0]["x"])


def test_flipped_lines_alternate_upright_and_upside_down_in_a_padded_batch():
    pytest.importorskip("PIL")
    from zoo import images

    (feed,) = images.flipped_lines_48x192(None, 0, 1)
    x = feed["x"]
    assert x.shape == (6, 3, 48, 192) and x.dtype == np.float32 and -1 <= x.min() and x.max() <= 1


def test_seal_companies_of_tune_and_report_are_apart_and_crops_are_736():
    pytest.importorskip("PIL")
    from zoo import seals

    assert not set(seals.NAMES[0::2]) & set(seals.NAMES[1::2])
    (feed,) = seals.seal_crops_736(None, 1000, 1)
    assert feed["x"].shape == (1, 3, 736, 736)
