"""The thirty-seventh round's zoo additions (zoo29): invariant 19 (zoo/free_worth.py), EfficientWord-
Net's log filterbank (zoo/hotword.py) and the two decisions. No Pillow, no fetched package."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import hotword  # noqa: E402
from zoo.free_worth import free_holds  # noqa: E402
from zoo.salient import salient_mask  # noqa: E402

U2NETP = ({"size": 1677683, "error": 0.460}, {"size": 1666500, "error": 0.0393})  # the shipped rows, 2026-12-01


def test_free_worth_fails_u2netp_and_passes_when_the_gap_is_small_or_paid_in_bytes():
    assert free_holds(*U2NETP)
    assert not free_holds({"size": 1000, "error": 0.03}, {"size": 1000, "error": 0.01})  # 3x: within the factor
    assert not free_holds({"size": 1000, "error": 0.015}, {"size": 1000, "error": 0.001})  # under the floor
    assert not free_holds({"size": 1000, "error": 0.46}, {"size": 1100, "error": 0.04})  # 10% more bytes
    assert not free_holds({"size": 1000}, {"size": 1000, "error": 0.04})  # a row without an error


def _reference_logfbank(x: np.ndarray) -> np.ndarray:
    """python_speech_features' logfbank as the package calls it, the slow way: each frame padded and
    transformed on its own, the filters built from their definition."""
    frames = [np.pad(x[i * 160:i * 160 + 400], (0, max(0, 400 - len(x[i * 160:i * 160 + 400]))))
              for i in range(1 + int(np.ceil((len(x) - 400) / 160)))]
    power = np.array([np.abs(np.fft.rfft(f, 512)) ** 2 / 512 for f in frames])
    return np.log(np.maximum(power @ hotword._filterbank().T, np.finfo(float).eps))


def test_logfbank_has_the_package_shape_and_values():
    x = np.random.default_rng(0).standard_normal(hotword.WINDOW) * 0.1
    x[:4000] = 0  # padding: the silent frames' log takes the floor, as the package's does
    feats = hotword.logfbank(x)
    assert feats.shape == (149, 64)  # the model's [1, 1, 149, 64]
    np.testing.assert_allclose(feats, _reference_logfbank(x), rtol=1e-9, atol=1e-9)
    fb = hotword._filterbank()
    assert fb.shape == (64, 257) and np.all(fb >= 0) and np.all(fb.max(1) <= 1)


def test_hotword_match_picks_the_nearest_reference(monkeypatch):
    refs = np.zeros((7, 7, 2048), np.float32)
    for w in range(7):
        refs[w, :, w] = 1.0
    monkeypatch.setattr(hotword, "references", lambda: refs)
    e = np.zeros((1, 2048), np.float32)
    e[0, 3], e[0, 5] = 0.8, 0.6  # nearest lights_off (index 3); (0.8 + 1) / 2 = 0.9 reaches 0.7
    assert hotword.hotword_match({"out": e}, {})[0].tolist() == [3, 1]
    e[0, 3], e[0, 5] = -0.3, 0.2  # nearest mobile; (0.2 + 1) / 2 = 0.6 (the rest 0.5, 0.35): none
    assert hotword.hotword_match({"out": e}, {})[0].tolist() == [5, 0]


@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_salient_mask_is_normalized_per_image(scale):
    d0 = np.array([0.0, 0.2, 0.7, 1.0], np.float32).reshape(1, 1, 2, 2) * scale + 0.1 * scale
    decided, sparse = salient_mask({"d0": d0}, {})
    assert decided.tolist() == [False, False, True, True] and not sparse
