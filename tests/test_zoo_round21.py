"""Twenty-first round: torch exports of trained weights that wheels ship (g2p_en's GRU pair,
ANNalog's transformer pair with a KV-cached decoder) and what they found.

- `quant --dtype int4` of ANNalog's encoder failed ("cannot reshape array of size 1 into shape
  (1,256)"): its input `tok_embedding(src) * sqrt(256) + pos_embedding(pos)` looked like a decomposed
  LayerNorm's `normalized * gamma + beta` to the clipping's input energy (symmetry.py), with a scalar
  gamma; one energy cannot be laid out over 256 input channels."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import quant_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo.models import BY_NAME, MODELS, SKIPPED  # noqa: E402


def _scaled_embedding_model() -> onnx.ModelProto:
    """Gather(tokens) * 16 + Gather(positions) -> MatMul 128x128: a transformer's input layer."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((32, 128)).astype(np.float32), "tok"),
             numpy_helper.from_array(rng.standard_normal((16, 128)).astype(np.float32), "pos"),
             numpy_helper.from_array(np.array([16.0], np.float32), "scale"),
             numpy_helper.from_array(np.arange(8, dtype=np.int64)[None], "positions"),
             numpy_helper.from_array((rng.standard_normal((128, 128)) / 11).astype(np.float32), "w")]
    nodes = [helper.make_node("Gather", ["tok", "ids"], ["e"]),
             helper.make_node("Mul", ["e", "scale"], ["es"]),
             helper.make_node("Gather", ["pos", "positions"], ["p"]),
             helper.make_node("Add", ["es", "p"], ["x"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 128])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_int4_of_a_scaled_embedding_sum_is_written(tmp_path):
    src, out = tmp_path / "emb.onnx", tmp_path / "int4.onnx"
    onnx.save(_scaled_embedding_model(), src)
    quant_file(src, out, dtype="int4", min_elements=1024)  # raised ValueError (reshape) before
    ids = np.array([[1, 5, 9, 2, 31, 7, 0, 3]], np.int64)
    run = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
           for p in (src, out)]
    assert np.linalg.norm(run[1] - run[0]) / np.linalg.norm(run[0]) < 0.2


def test_round21_models_are_new():
    for name, package in (("g2p_en_encoder", "g2p-en"), ("g2p_en_decoder", "g2p-en"),
                          ("annalog_encoder", "annalog"), ("annalog_decoder", "annalog")):
        assert BY_NAME[name].package.startswith(package + "==") and BY_NAME[name].source == "torch"
        assert not any(package in k for k in SKIPPED)
    assert len({m.name for m in MODELS}) == len(MODELS)
