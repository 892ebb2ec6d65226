"""The fourteenth round's zoo pieces: errors of an output ranked by a TopK measured as verification
measures them (rows as a set), the end-to-end detector's order-free decision, madmom's key
features (zoo/music.py, numpy only), the Arabic sentences' bare skeleton and the barcodes'
EAN-13 symbols (zoo/isbn.py, Pillow: skipped where `make test` has none)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _detections(rng, k=300):
    rows = np.zeros((1, k, 6), np.float32)
    rows[0, :, :4] = rng.uniform(0, 1280, (k, 4))
    rows[0, :, 4] = rng.uniform(0, 1e-4, k)  # the ~0 scores that tie and swap
    rows[0, 0] = [100, 200, 400, 300, 0.97, 2]
    return rows


def test_ranked_rows_swapped_are_no_error_row_by_row_they_are():
    from zoo.invariants import output_error, per_output_errors, rel_l2

    ref = _detections(np.random.default_rng(0))
    got = ref.copy()
    got[0, 1:] = got[0, 1:][np.random.default_rng(1).permutation(299)]
    assert rel_l2(ref, got) > 0.3
    assert output_error("output0", ref, got, {"output0": 300}) == 0.0
    assert per_output_errors([{"output0": ref}], [{"output0": got}], {"output0": 300}) == {"output0": 0.0}
    moved = got.copy()
    moved[0, 0, :4] += 50  # the confident box itself moved: that costs
    assert output_error("output0", ref, moved, {"output0": 300}) > 1e-3
    assert output_error("other", ref, got, {"output0": 300}) == rel_l2(ref, got)  # not ranked: row by row


def test_end2end_boxes_ignore_row_order_and_see_a_lost_box():
    from zoo.decisions import agreement, end2end_boxes

    ref = _detections(np.random.default_rng(2))
    feed = {"images": np.zeros((1, 3, 1280, 1280), np.float32)}
    a, sparse = end2end_boxes({"output0": ref}, feed)
    assert sparse and a.shape == (40 * 40,) and set(np.unique(a)) == {0, 3}
    shuffled = ref[:, np.random.default_rng(3).permutation(300)]
    assert agreement(a, end2end_boxes({"output0": shuffled}, feed)[0], True) == 1.0
    lost = ref.copy()
    lost[0, 0, 4] = 0.2  # under isbnx's conf_threshold 0.3
    assert agreement(a, end2end_boxes({"output0": lost}, feed)[0], True) == 0.0


def test_key_filterbank_is_madmoms_log_bands():
    from zoo import music

    bank = music._filterbank()
    assert bank.shape == (4096, 105) and bank.dtype == np.float32  # the key CNN's 105 input bins
    assert np.allclose(bank.sum(axis=0), 1, atol=1e-5)  # norm_filters: each filter's area 1
    centres = bank.argmax(axis=0) * 44100 / 8192
    assert 60 < centres[0] < 75 and 1900 < centres[-1] < 2150 and (np.diff(bank.argmax(axis=0)) > 0).all()


def test_key_spectrogram_frames_and_an_a_tone():
    from zoo import music

    t = np.arange(44100 * 3) / 44100
    x = music.key_spectrogram((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32))
    assert x.shape == (15, 105) and x.dtype == np.float32  # ceil(3 s * 5 fps) frames, centred
    band = x[7].argmax()
    assert abs(music._filterbank()[:, band].argmax() * 44100 / 8192 - 440) < 10


def test_key_pieces_tune_and_report_keys_are_apart():
    from zoo import music

    assert not set(music.KEYS[0::2]) & set(music.KEYS[1::2])
    assert len(music.KEYS) == 24 and music.KEYS[12] == (0, "minor")  # madmom's KEY_LABELS: A major .. G# minor


def test_tashkeel_bare_drops_the_marks():
    from zoo import tashkeel

    assert tashkeel._bare("بِسْمِ اللَّهِ") == "بسم الله"
    assert tashkeel._bare("قرأت") == "قرات"  # NFD: the hamza above is a mark rawi restores itself


def test_ean13_symbol_of_a_known_isbn():
    from zoo import isbn

    bits = isbn._ean13_bits("9780306406157")
    assert len(bits) == 95 and bits.startswith("101") and bits.endswith("101") and bits[45:50] == "01010"
    assert bits[3:10] == "0111011"  # 7 after a leading 9 (parity LGGLGL: L first), its L code
    for seed in range(20):
        code = isbn._isbn13(np.random.default_rng(seed))
        d = [int(c) for c in code]
        assert sum(x * (3 if i % 2 else 1) for i, x in enumerate(d)) % 10 == 0


def test_info_prediction_holds_within_slack_and_fails_past_it():
    import json

    from zoo.predicted import within_prediction

    info = json.dumps({"model_bytes": 10_000_000, "savings": {"shrink": 0, "quant int8": 7_000_000,
                                                              "quant int4": 8_000_000}})
    rows = {"shrink --verify": {"rc": 0, "size": 10_000_000}, "quant": {"rc": 0, "size": 3_200_000},
            "quant --dtype int4": {"rc": 2, "size": None}}
    assert within_prediction(info, rows) == []  # 3.2 MB for a predicted 3.0: within 15%
    rows["quant --dtype int4"] = {"rc": 0, "size": 3_000_000}  # int4 predicted 2 MB: 1.5x
    (fail,) = within_prediction(info, rows)
    assert "quant int4" in fail and "1.50x" in fail
    assert within_prediction("not json", rows)[0].startswith("no savings")
