"""The twenty-sixth round's (exports) zoo modules, on what they compute without their packages:
invariant 18 (zoo/int4_worth.py), Sapiens' encoding and decision, ChemNet's one-hot and decision."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zoo import chemnet, sapiens  # noqa: E402
from zoo.int4_worth import int4_pays  # noqa: E402


def test_int4_that_saves_nothing_and_errs_more_fails():
    """chemnet_fcd's figures before the fix fail; after it (the same bytes, the same error) they hold."""
    int8 = {"size": 1_456_538, "error": 0.0307}
    assert int4_pays(int8, {"size": 1_449_042, "error": 0.1701})
    assert int4_pays(int8, {"size": 1_456_568, "error": 0.0307}) == []


def test_int4_that_saves_bytes_or_errs_little_holds():
    int8 = {"size": 100_000, "error": 0.01}
    assert int4_pays(int8, {"size": 99_000, "error": 0.2})  # the same bytes at 20x the error: fails
    assert int4_pays(int8, {"size": 60_000, "error": 0.2}) == []  # a real saving: the trade it offers
    assert int4_pays(int8, {"size": 99_000, "error": 0.015}) == []  # hardly worse
    assert int4_pays({"size": 100_000, "error": 0.001}, {"size": 99_000, "error": 0.01}) == []  # both under the floor
    assert int4_pays(int8, {"size": 99_000, "error": None}) == []  # not run: other invariants judge it
    assert int4_pays(int8, {"rc": 2}) == []


def test_a_file_mostly_graph_is_not_judged():
    """surfaces_knn_surrogate (8 KB): its storage alone moved int4's share across the 90% line."""
    assert int4_pays({"size": 8_618, "error": 0.0012}, {"size": 7_911, "error": 0.0417}) == []


def test_sapiens_encodes_as_fairseq_and_decides_on_residues_only():
    assert sapiens.encode("QV*X") == [0, 17, 21, 24, 24, 2]
    feed = sapiens.antibody_heavy_chains(None, 0, 1)[0]
    tokens = feed["tokens"]
    assert tokens.shape[0] == 4 and (tokens == sapiens.MASK).any() and (tokens == sapiens.PAD).any()
    logits = np.zeros(tokens.shape + (25,), np.float32)
    logits[..., 4] = 1.0  # A everywhere
    logits[..., 1] = 5.0  # <pad> scores highest: not a residue, not decided
    decided, sparse = sapiens.residues({"logits": logits}, feed)
    residues = ((tokens != sapiens.PAD) & (tokens != 0) & (tokens != 2)).sum()
    assert not sparse and decided.shape == (residues,) and (decided == 0).all()
    tune, report = (sapiens.antibody_heavy_chains(None, s, 4) for s in (0, 1000))
    assert not any(np.array_equal(a["tokens"], b["tokens"]) for a in tune for b in report)


def test_chemnet_one_hot_reads_two_letter_symbols_and_ends_with_a_dot():
    x = chemnet.one_hot("ClCBr") * len(chemnet.VOCAB)
    rows = [chemnet.VOCAB[i] for i in x.argmax(1)[:4]]
    assert rows == ["Cl", "C", "Br", "."] and x[4:].sum() == 0
    assert chemnet.one_hot("C[Na]")[2].argmax() == chemnet.VOCAB.index("N")  # 'a' is not a second letter


def test_chemnet_decides_the_two_nearest_others():
    a = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0.5, 0.5, 0]], np.float32)
    decided, sparse = chemnet.nearest_molecule({"activations": a}, {})
    assert not sparse and decided.reshape(4, 2)[0].tolist() == [1, 3] and decided.reshape(4, 2)[2].tolist() == [3, 1]
