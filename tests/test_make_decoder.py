"""samples/make_decoder.py: tiny decoders of each variant load and run in onnxruntime, with the
shapes their options say, a KV cache that gives the same logits as the whole sequence, a causal
mask, rotary positions that matter, and weights at page-aligned offsets of one data file."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxsurgery.running.feeds import make_inputs

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("make_decoder", ROOT / "samples" / "make_decoder.py")
make_decoder = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("make_decoder", make_decoder)
_spec.loader.exec_module(make_decoder)

VOCAB, HIDDEN, HEADS = 96, 32, 4
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": np.float32}  # bfloat16 computes in float32


def build(tmp_path: Path, **options) -> tuple[Path, make_decoder.Config]:
    cfg = make_decoder.config_from("tiny", hidden=HIDDEN, intermediate=48, layers=2, heads=HEADS, vocab=VOCAB,
                                   max_positions=64, **{"kv_heads": HEADS, **options})
    return make_decoder.build(cfg, tmp_path / "decoder", threads=2), cfg


def session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def step(sess, cfg, ids: np.ndarray, past: dict | None = None, start: int = 0) -> dict[str, np.ndarray]:
    """Outputs by name for `ids` [batch, n] after `start` cached tokens (`past`: a previous step's outputs)."""
    batch, n = ids.shape
    feeds = {"input_ids": ids, "attention_mask": np.ones((batch, start + n), np.int64),
             "position_ids": np.broadcast_to(np.arange(start, start + n), (batch, n)).astype(np.int64)}
    head = cfg.hidden // cfg.heads
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values"):
            empty = np.zeros((batch, cfg.kv_heads, 0, head), NP[cfg.dtype])
            feeds[i.name] = (past or {}).get(i.name.replace("past_key_values", "present"), empty)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


VARIANTS = {
    "untied-kv-rotary": {},
    "tied-gqa": dict(tied=True, kv_heads=2),
    "no-kv-no-rotary": dict(kv_cache=False, rotary=False),
    "fp16-tied-mqa": dict(dtype="float16", tied=True, kv_heads=1),
    "bf16-no-rotary": dict(dtype="bfloat16", rotary=False),
    "bf16-no-kv-tied": dict(dtype="bfloat16", kv_cache=False, tied=True),
    "opset21": dict(opset=21, kv_heads=2),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_runs_on_generated_inputs(tmp_path, name):
    path, cfg = build(tmp_path, **VARIANTS[name])
    onnx.checker.check_model(str(path), full_check=True)
    sess = session(path)
    feeds = make_inputs(sess, model=path)  # what quant's verification feeds it
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    batch, seq = feeds["input_ids"].shape
    head = HIDDEN // HEADS
    logits = out["logits"]
    assert logits.shape == (batch, seq, VOCAB)
    assert logits.dtype == NP[cfg.dtype]
    assert np.isfinite(logits.astype(np.float32)).all() and np.abs(logits).max() > 0
    presents = sorted(k for k in out if k.startswith("present."))
    if cfg.kv_cache:
        past = feeds["past_key_values.0.key"].shape[2]
        assert presents == [f"present.{i}.{kv}" for i in range(cfg.layers) for kv in ("key", "value")]
        for k in presents:
            assert out[k].shape == (batch, cfg.kv_heads, past + seq, head)
    else:
        assert presents == []
        assert not any(i.name.startswith("past") for i in sess.get_inputs())
    initializers = {t.name: t for t in onnx.load(str(path), load_external_data=False).graph.initializer}
    assert ("lm_head.weight" in initializers) != cfg.tied
    want = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
            "bfloat16": onnx.TensorProto.BFLOAT16}[cfg.dtype]
    assert initializers["model.embed_tokens.weight"].data_type == want
    config = json.loads((path.parent / "config.json").read_text())
    assert config["num_key_value_heads"] == cfg.kv_heads and config["tie_word_embeddings"] == cfg.tied


@pytest.mark.parametrize("options", [dict(kv_heads=2), dict(dtype="float16", tied=True, kv_heads=1)],
                         ids=["gqa", "fp16-mqa"])
def test_cache_step_gives_the_whole_sequence_logits(tmp_path, options):
    path, cfg = build(tmp_path, **options)
    sess = session(path)
    ids = np.random.default_rng(0).integers(0, VOCAB, (2, 9)).astype(np.int64)
    whole = step(sess, cfg, ids)["logits"].astype(np.float32)
    first = step(sess, cfg, ids[:, :6])
    rest = step(sess, cfg, ids[:, 6:], past=first, start=6)["logits"].astype(np.float32)
    tol = 1e-2 if cfg.dtype == "float16" else 1e-5
    np.testing.assert_allclose(rest, whole[:, 6:], atol=tol)
    later = ids.copy()
    later[:, 7:] = (later[:, 7:] + 1) % VOCAB  # causal: changing later tokens leaves earlier logits alone
    np.testing.assert_array_equal(step(sess, cfg, later)["logits"][:, :7], whole[:, :7].astype(NP[cfg.dtype]))


@pytest.mark.parametrize("rotary", [True, False])
def test_positions_matter_only_with_rotary(tmp_path, rotary):
    path, cfg = build(tmp_path, rotary=rotary, kv_cache=False)
    sess = session(path)
    ids = np.random.default_rng(1).integers(0, VOCAB, (1, 6)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(6)[None]}
    base = sess.run(["logits"], feeds)[0]
    swapped = sess.run(["logits"], {**feeds, "position_ids": np.array([[0, 1, 2, 3, 5, 4]])})[0]
    assert (np.abs(base - swapped).max() > 1e-4) == rotary


def test_weights_stream_into_one_aligned_file(tmp_path):
    path, cfg = build(tmp_path, tied=False)
    model = onnx.load(str(path), load_external_data=False)
    data = path.parent / "model.onnx.data"
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert len(external) == 9 * cfg.layers + 2 + 2 + 1  # per layer 7 matrices + 2 norms; table, head; rotary; norm
    spans = []
    for t in external:
        info = {e.key: e.value for e in t.external_data}
        assert info["location"] == data.name and int(info["offset"]) % 4096 == 0
        spans.append((int(info["offset"]), int(info["offset"]) + int(info["length"])))
    assert max(end for _, end in spans) == data.stat().st_size
    values = {t.name: onnx.numpy_helper.to_array(t, base_dir=str(path.parent)) for t in external}
    assert len({v.tobytes() for v in values.values()}) == len(values)  # every weight distinct
    q = values["model.layers.0.self_attn.q_proj.weight"]
    assert q.shape == (HIDDEN, HIDDEN) and 0.01 < q.std() < 0.03
    assert abs(values["model.norm.weight"].mean() - 1) < 0.02
    again, _ = build(tmp_path / "again", tied=False)  # the same bytes from the same seed
    assert (again.parent / "model.onnx.data").read_bytes() == data.read_bytes()


def test_presets_and_sizes():
    small = make_decoder.config_from("1.4b")
    assert (small.layers, small.hidden, small.intermediate, small.vocab, small.tied) == (24, 2048, 5632, 32000, False)
    assert round(small.parameters / 1e9, 2) == 1.36
    large = make_decoder.config_from("6.7b")
    assert (large.layers, large.hidden, large.intermediate) == (32, 4096, 11008)
    assert round(large.parameters / 1e9, 2) == 6.74
    with pytest.raises(ValueError):
        make_decoder.config_from("tiny", heads=4, kv_heads=3)
