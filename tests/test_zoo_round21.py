"""Twenty-first round: torch exports of trained weights that wheels ship (g2p_en's GRU pair,
ANNalog's transformer pair with a KV-cached decoder) and what they found.

- `quant --dtype int4` of ANNalog's encoder failed ("cannot reshape array of size 1 into shape
  (1,256)"): its input `tok_embedding(src) * sqrt(256) + pos_embedding(pos)` looked like a decomposed
  LayerNorm's `normalized * gamma + beta` to the clipping's input energy (symmetry.py), with a scalar
  gamma; one energy cannot be laid out over 256 input channels.
- `info` predicted ANNalog's decoder's `quant` at 2.62 MB where 3.22 MB were written (invariant 13):
  quant writes a KV-cache decoder's weights to a page-aligned data file, and info counted no
  alignment."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import quant_file
from onnxsurgery.inventory import inventory

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


def _cached_decoder(n: int = 12) -> onnx.ModelProto:
    """x [1, S, 64] through n MatMuls (64x96, 96x64, ...), its last output concatenated to a past:
    a decoder fed its own past, by name; each weight 6144 elements (6 KB in int8, 2 KB short of a page)."""
    rng = np.random.default_rng(0)
    inits, nodes, h = [], [], "x"
    for i in range(n):
        shape = (64, 96) if i % 2 == 0 else (96, 64)
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / 8).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [f"h{i}"]))
        h = f"h{i}"
    nodes.append(helper.make_node("Concat", ["past_key_values.0.key", h], ["present.0.key"], axis=1))
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", 64]),
                                       helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                                                     [1, "p", 64])],
                          [helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, [1, "t", 64])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_info_counts_the_data_files_alignment_of_a_kv_cache_decoder(tmp_path):
    src, out = tmp_path / "dec.onnx", tmp_path / "int8.onnx"
    onnx.save(_cached_decoder(), src)
    found = inventory(str(src))
    predicted = found["model_bytes"] - found["savings"]["quant int8"]
    quant_file(src, out, dtype="int8")
    written = sum(p.stat().st_size for p in tmp_path.glob("int8.onnx*"))
    assert (tmp_path / "int8.onnx.data").exists()  # the decoder's weights go to a data file
    assert abs(written - predicted) < 0.05 * written + 4096  # 30 KB short before (86 KB of 116 KB)
    assert found["data_file_alignment_bytes"] > 0


def test_round21_models_are_new():
    for name, package in (("g2p_en_encoder", "g2p-en"), ("g2p_en_decoder", "g2p-en"),
                          ("annalog_encoder", "annalog"), ("annalog_decoder", "annalog")):
        assert BY_NAME[name].package.startswith(package + "==") and BY_NAME[name].source == "torch"
        assert not any(package in k for k in SKIPPED)
    assert len({m.name for m in MODELS}) == len(MODELS)
