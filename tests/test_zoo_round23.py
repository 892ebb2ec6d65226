"""Twenty-third round: torch exports of trained weights that wheels ship (khmer-ocr-ocm's CRNN, a
Khmer line recognizer with a 2-layer bidirectional LSTM; arabic-diacritizer's character BiLSTM with
Bahdanau attention), and the zoo's own code for their inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import arabic_bilstm, khmer_ocr  # noqa: E402
from zoo.models import BY_NAME, MODELS, SKIPPED  # noqa: E402

def test_round23_models_are_new():
    names = [m.name for m in MODELS]
    assert len(names) == len(set(names))

    # not inputs.maker: it imports every input module, Pillow's too (the dev extra has none)
    for name, package, module in (("khmer_ocr_crnn", "khmer-ocr-ocm", khmer_ocr),
                                  ("arabic_diacritizer_bilstm", "arabic-diacritizer", arabic_bilstm)):
        row = BY_NAME[name]
        assert row.package.startswith(package + "==") and row.source == "torch"
        assert not any(package in k for k in SKIPPED)
        assert callable(getattr(module, row.inputs))


def test_the_tokenizer_table_is_read_from_the_wheels_constants(tmp_path, monkeypatch):
    pkg = tmp_path / "arabic"
    (pkg / "diacritize").mkdir(parents=True)
    (pkg / "diacritize" / "tokenizer.py").write_text(
        'PAD = 0\nARABIC_LETTERS = (\n    "ابت"\n    "ث"\n)\nPUNCTUATION = " .ا"\n', encoding="utf-8")
    monkeypatch.setattr("zoo.words._package", lambda spec: pkg)
    table = arabic_bilstm._char_to_id()
    # specials 0-3, the letters from 4, the punctuation after them; a repeated character keeps its last id,
    # as CharTokenizer's dict assignments do
    assert table == {"ا": 10, "ب": 5, "ت": 6, "ث": 7, " ": 8, ".": 9}
    feeds = arabic_bilstm.arabic_bilstm_sentences(None, 0, 2)
    assert [f["input_ids"].shape[0] for f in feeds] == [1, 1] and feeds[0]["input_ids"].dtype == np.int64
    assert set(np.unique(feeds[0]["input_ids"])) <= {1, 5, 6, 7, 8, 9, 10}  # unknown characters: <UNK> = 1
