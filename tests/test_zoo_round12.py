"""The twelfth round's zoo inputs and decisions where they need no package: magika's byte features
(zoo/filetypes.py) as magika 1.0.3's `_extract_features_from_seekable` computes them, LAC's tune
and report sentences apart (zoo/hanzi.py), and its tags read up to each sentence's length."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions, filetypes, hanzi  # noqa: E402

CONFIG = {"beg_size": 4, "end_size": 4, "block_size": 8, "padding_token": 256}


def test_a_short_file_is_stripped_and_padded_after_its_start_and_before_its_end():
    x = filetypes.features(b" ab\n", CONFIG)  # the start lstripped, the end rstripped (each only one side)
    assert x.dtype == np.int32 and x.tolist() == [97, 98, 10, 256] + [256, 32, 97, 98]


def test_a_long_file_gives_its_first_and_last_bytes_within_one_block():
    data = b"\t" + bytes(range(65, 91)) + b"  "
    x = filetypes.features(data, CONFIG).tolist()
    # the first block (8 bytes) lstripped: ABCDEFG -> ABCD; the last block rstripped: TUVWXYZ -> WXYZ
    assert x == [65, 66, 67, 68, 87, 88, 89, 90]


def test_lac_tune_and_report_sentences_are_apart():
    tune, report = hanzi.SENTENCES[:8], hanzi.SENTENCES[8:]
    assert len(tune) == len(report) == 8 and not set(tune) & set(report)


def test_tags_are_read_up_to_each_sentence_s_length():
    emissions = np.zeros((2, 3, 4), np.float32)
    emissions[0, :, 1] = 1  # sentence 0: 3 characters of tag 1
    emissions[1, 0, 2] = 1  # sentence 1: 1 character of tag 2, then padding (tag 0) that is no decision
    tags, sparse = decisions.tags_within_length({"e": emissions}, {"length": np.array([3, 1])})
    assert tags.tolist() == [1, 1, 1, 2] and not sparse


def test_magika_files_follow_the_seed_past_the_tune_and_report_sets():
    paths = [Path(f"w/{i}{ext}") for i in range(12) for ext in (".py", ".json", ".exe")]
    tune, report = filetypes.interleaved(paths, 0), filetypes.interleaved(paths, 1)
    assert report == filetypes.interleaved(paths, 1)  # seed 1000: the report set, as it was
    assert not set(tune) & set(report) and [p.suffix for p in report[:3]] == [".exe", ".json", ".py"]
    fresh = [filetypes.interleaved(paths, 1, np.random.default_rng(s)) for s in (2000, 3000)]
    assert fresh[0] != fresh[1] and fresh[0] != report  # fresh draws differ by seed
    assert all(sorted(f) == sorted(report) for f in fresh)  # within the report half
    assert [p.suffix for p in fresh[0][:3]] == [".exe", ".json", ".py"]  # still several kinds a batch
