"""The tenth round's zoo inputs and decisions where they need no package (zoo/fbank.py,
zoo/glyphs.py, zoo/lemmas.py, zoo/decisions.py): Kaldi's filterbank puts a tone where Kaldi's mel
scale says, LFR stacks five frames, tune and report sets share nothing, and each decision reads
the outputs as its package does."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions, fbank, glyphs, lemmas  # noqa: E402


def test_a_tone_lights_the_mel_bin_of_its_frequency():
    t = np.arange(16000) / 16000
    feats = fbank.fbank((0.3 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32))
    assert feats.shape == (98, 80)  # snip_edges: 1 + (16000 - 400) // 160 whole frames
    mel = 1127 * np.log(1 + np.array([20, 1000, 8000]) / 700)
    centre = (mel[1] - mel[0]) / ((mel[2] - mel[0]) / 81) - 1  # the filter whose centre is 1 kHz
    assert abs(int(np.median(feats.argmax(1))) - centre) <= 1


def test_lfr_stacks_five_frames_padded_with_the_first_and_last():
    feats = np.arange(12, dtype=np.float64).reshape(6, 2)
    shift, scale = np.zeros(10), np.ones(10)
    original = fbank._cmvn
    fbank._cmvn = lambda: (shift, scale)
    try:
        out = fbank.lfr_cmvn(feats)
    finally:
        fbank._cmvn = original
    assert out.shape == (6, 10)
    assert out[0].tolist() == [0, 1, 0, 1, 0, 1, 2, 3, 4, 5]  # two copies of frame 0, then frames 0-2
    assert out[-1].tolist() == [6, 7, 8, 9, 10, 11, 10, 11, 10, 11]  # frames 3-5, then the last twice


def test_tune_and_report_share_no_word_and_no_glyph():
    half = len(lemmas.WORDS) // 2
    assert not set(lemmas.WORDS[:half]) & set(lemmas.WORDS[half:])
    assert not set(glyphs.GLYPHS[0::2]) & set(glyphs.GLYPHS[1::2])


def test_decisions_read_the_outputs_as_the_packages_do():
    sim = np.full((16, 1), 0.1, np.float32)
    sim[[2, 4, 11, 13]] = 0.9  # template i matches target (2, 0, 3, 1)[i]
    assert decisions.siamese_match({"dense_1": sim}, None)[0].tolist() == [2, 0, 3, 1]
    silence = np.array([0.9, 0.25, 0.2, 0.05], np.float32)
    probs = np.stack([silence, 1 - silence], -1)[None]
    assert decisions.vad_frames({"logits": probs}, None)[0].tolist() == [False, False, True, True]
    token = np.eye(5, dtype=np.float32)[[3, 1, 4]][None]
    code = np.array([[0.1, 2.0, 0.3]], np.float32)
    got = decisions.lemma_tokens({"token_logits": token, "code_logits": code}, None)[0]
    assert got.tolist() == [3, 1, 4, 1]


def test_a_fresh_tabular_set_shares_no_row_with_tune_or_report(monkeypatch):
    """bench/fresh_samples.py's seeds draw rows past the tune and report rows (sk_mlp_digits' fresh
    set was its report set: the builder ignored the seed)."""
    from zoo import inputs

    rows = np.arange(900 * 3, dtype=np.float32).reshape(900, 3)
    monkeypatch.setattr(inputs, "_heldout", lambda loader: rows)
    tune, report = inputs.digits_rows(None, 0, 64)[0]["input"], inputs.digits_rows(None, 1000, 200)[0]["input"]
    assert tune.tolist() == rows[:64].tolist() and report.tolist() == rows[64:264].tolist()  # as before
    fresh = [inputs.digits_rows(None, seed, 16)[0]["input"] for seed in (2000, 3000)]
    seen = {tuple(r) for r in np.concatenate([tune, report]).tolist()}
    assert all(len(f) == 16 and not seen & {tuple(r) for r in f.tolist()} for f in fresh)
    assert fresh[0].tolist() != fresh[1].tolist()
