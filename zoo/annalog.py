"""ANNalog (PyPI annalog 1.0.6): a SMILES-to-SMILES transformer (3 + 3 layers, 256 wide, 8 heads;
Trevett's seq2seq tutorial model) that writes medicinal-chemistry analogues of a molecule. Its trained
weights ship in the wheel as a torch state dict (ckpt_and_vocab/Lev_extended.pt, 16 MB) beside its
vocabulary (one pickle for source and target, 59 tokens). Exported here with torch's TorchScript
exporter from the wheel's own model code (model_files/seq2seq_attention.py), as a pair:

- annalog_encoder: `input_ids` [B, L] int64 (<sos>, the SMILES tokens, <eos>, <pad>...), and
  `attention_mask` [B, L] int64 -> `last_hidden_state` [B, L, 256]
- annalog_decoder: a decoder with a KV cache, laid out as optimum lays one out: `input_ids` [B, S],
  `encoder_hidden_states`, `encoder_attention_mask`, `past_key_values.{i}.decoder.key/value`
  [B, 8, P, 32] for its 3 layers -> `logits` [B, S, 59], `present.{i}.decoder.key/value` [B, 8, P+S, 32].
  Positions count from P (its learned position table has 102 rows); a new token sees every past one.

Inputs: zoo/molecules.py's 16 drug/analogue pairs, tokenized as its SMILESTokenizer does; tune on
the first 8 pairs' molecules, report on the last 8, 4 molecules a batch. The decoder's samples are
greedy decoding with the cache carried: a first call of <sos> and 3 tokens with an empty cache,
then 3 calls of one token each, the cache returned by the call before fed in.
"""

from __future__ import annotations

import pickle
import re
import sys
import types
from functools import lru_cache
from pathlib import Path

import numpy as np

PACKAGE = "annalog==1.0.6"
LAYERS, HEADS, HEAD = 3, 8, 32
FIRST, STEPS = 4, 3  # the first call's tokens, then one-token calls
_TOKEN = re.compile(r"(\[[^\]]*\])|(%\d{2})|(Br|Cl)|(.)")  # SMILESTokenizer: brackets, %nn, Br/Cl, else chars


def _model(package_dir: Path):
    import torch

    root = package_dir / "annalog"
    pkg = types.ModuleType("annalog_model_files")  # its package imports `vocabulary` (deepsmiles): a stub
    pkg.__path__ = []
    sys.modules.setdefault("annalog_model_files", pkg)
    sys.modules.setdefault("annalog_model_files.vocabulary", types.ModuleType("annalog_model_files.vocabulary"))
    mod = types.ModuleType("annalog_model_files.seq2seq_attention")
    mod.__package__ = "annalog_model_files"
    src = (root / "model_files" / "seq2seq_attention.py").read_text()
    exec(compile(src, "annalog/model_files/seq2seq_attention.py", "exec"), mod.__dict__)
    n = len(_vocab(package_dir))
    cpu = torch.device("cpu")
    enc = mod.Encoder(n, 256, LAYERS, HEADS, 512, 0.1, cpu, 102)  # as model_handler.py builds it
    dec = mod.Decoder(n, 256, LAYERS, HEADS, 512, 0.1, cpu, 102)
    model = mod.Seq2Seq(enc, dec, 1, 1, cpu)
    state = torch.load(root / "ckpt_and_vocab" / "Lev_extended.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.eval()


@lru_cache(maxsize=2)
def _vocab(package_dir: Path) -> list[str]:
    with open(package_dir / "annalog" / "ckpt_and_vocab" / "stereo_experiment_vocab_ttf.pkl", "rb") as f:
        return list(pickle.load(f)["itos"])


def _export(torch, model, args, out: Path, names_in, names_out, axes) -> None:
    with torch.no_grad():
        torch.onnx.export(model, args, str(out), input_names=names_in, output_names=names_out, dynamic_axes=axes,
                          opset_version=17, dynamo=False)


def encoder(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    seq2seq = _model(package_dir)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = seq2seq.encoder

        def forward(self, input_ids, attention_mask):
            return self.encoder(input_ids, attention_mask[:, None, None, :])

    ids = torch.tensor([[2, 5, 5, 9, 3], [2, 5, 9, 3, 1]])
    _export(torch, Encoder().eval(), (ids, (ids != 1).long()), out, ["input_ids", "attention_mask"],
            ["last_hidden_state"], {"input_ids": {0: "batch", 1: "src"}, "attention_mask": {0: "batch", 1: "src"},
                                    "last_hidden_state": {0: "batch", 1: "src"}})


def _attend(torch, att, q_in, k, v, mask):
    """The wheel's MultiHeadAttentionLayer.forward on given keys and values [B, H, K, D]."""
    b = q_in.shape[0]
    q = att.fc_q(q_in).view(b, -1, HEADS, HEAD).permute(0, 2, 1, 3)
    energy = torch.matmul(q, k.permute(0, 1, 3, 2)) / att.scale
    energy = energy.masked_fill(mask == 0, -1e10)
    x = torch.matmul(torch.softmax(energy, dim=-1), v).permute(0, 2, 1, 3).reshape(b, -1, HEADS * HEAD)
    return att.fc_o(x)


def _heads(att_fc, x):
    return att_fc(x).view(x.shape[0], -1, HEADS, HEAD).permute(0, 2, 1, 3)


def decoder(package_dir: Path, path_in_package: str, out: Path) -> None:
    import torch

    dec = _model(package_dir).decoder

    class CachedDecoder(torch.nn.Module):
        """DecoderLayer.forward with the self-attention's keys and values kept (eval: no dropout)."""

        def __init__(self):
            super().__init__()
            self.dec = dec

        def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask, *past):
            b, s, p = input_ids.shape[0], input_ids.shape[1], past[0].shape[2]
            pos = (torch.arange(s) + p)[None, :].expand(b, s)
            x = self.dec.tok_embedding(input_ids) * self.dec.scale + self.dec.pos_embedding(pos)
            causal = (torch.arange(p + s)[None, :] <= (torch.arange(s) + p)[:, None])[None, None]
            src_mask = encoder_attention_mask[:, None, None, :]
            presents = []
            for i, layer in enumerate(self.dec.layers):
                sa = layer.self_attention
                k = torch.cat([past[2 * i], _heads(sa.fc_k, x)], dim=2)
                v = torch.cat([past[2 * i + 1], _heads(sa.fc_v, x)], dim=2)
                presents += [k, v]
                x = layer.self_attn_layer_norm(x + _attend(torch, sa, x, k, v, causal))
                ea = layer.encoder_attention
                x = layer.enc_attn_layer_norm(x + _attend(torch, ea, x, _heads(ea.fc_k, encoder_hidden_states),
                                                          _heads(ea.fc_v, encoder_hidden_states), src_mask))
                x = layer.ff_layer_norm(x + layer.positionwise_feedforward(x))
            return (self.dec.fc_out(x), *presents)

    past_names = [f"past_key_values.{i}.decoder.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    present_names = [n.replace("past_key_values", "present") for n in past_names]
    args = (torch.tensor([[2, 5], [2, 9]]), torch.zeros(2, 6, 256), torch.ones(2, 6, dtype=torch.int64),
            *[torch.zeros(2, HEADS, 3, HEAD) for _ in past_names])
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "encoder_hidden_states": {0: "batch", 1: "encoder_sequence"},
            "encoder_attention_mask": {0: "batch", 1: "encoder_sequence"}, "logits": {0: "batch", 1: "sequence"}}
    axes.update({n: {0: "batch", 2: "past_sequence"} for n in past_names})
    axes.update({n: {0: "batch", 2: "past_sequence + sequence"} for n in present_names})
    _export(torch, CachedDecoder().eval(), args, out,
            ["input_ids", "encoder_hidden_states", "encoder_attention_mask", *past_names], ["logits", *present_names],
            axes)


# ---------------------------------------------------------------- inputs
def _batches(seed: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from zoo.fetch import _pip_package
    from zoo.molecules import PAIRS

    itos = _vocab(_pip_package(PACKAGE))
    stoi = {t: i for i, t in enumerate(itos)}
    pairs = PAIRS[:8] if seed < 1000 else PAIRS[8:]
    molecules = [m for pair in pairs for m in pair]
    out = []
    for i in range(n):
        batch = [molecules[(4 * i + j) % len(molecules)] for j in range(4)]
        seqs = [[2] + [stoi.get(t, 0) for t in (m.group(0) for m in _TOKEN.finditer(smi))] + [3] for smi in batch]
        width = max(len(s) for s in seqs)
        ids = np.array([s + [1] * (width - len(s)) for s in seqs], np.int64)  # <pad> is 1
        out.append((ids, (ids != 1).astype(np.int64)))
    return out


def annalog_sources(model, seed, n):
    return [{"input_ids": ids, "attention_mask": mask} for ids, mask in _batches(seed, n)]


def annalog_steps(model, seed, n):
    """n samples: n // 4 batches, each a first call (<sos> and 3 greedy tokens, empty cache) and 3
    one-token calls with the cache the call before returned."""
    import onnxruntime as ort

    from zoo.sources import dependency

    enc = ort.InferenceSession(str(dependency("annalog_encoder")), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    past_names = [i.name for i in dec.get_inputs() if i.name.startswith("past_key_values")]
    feeds = []
    for ids, mask in _batches(seed, max(1, n // (1 + STEPS))):
        (memory,) = enc.run(None, {"input_ids": ids, "attention_mask": mask})
        past = {name: np.zeros((len(ids), HEADS, 0, HEAD), np.float32) for name in past_names}
        tokens = np.full((len(ids), 1), 2, np.int64)  # <sos>
        for _ in range(FIRST - 1):  # the first call's prefix: the model's own greedy tokens
            logits = dec.run(["logits"], {"input_ids": tokens, "encoder_hidden_states": memory,
                                          "encoder_attention_mask": mask, **past})[0]
            tokens = np.concatenate([tokens, logits[:, -1:].argmax(-1)], axis=1)
        step = tokens
        for _ in range(1 + STEPS):
            feed = {"input_ids": step, "encoder_hidden_states": memory, "encoder_attention_mask": mask, **past}
            feeds.append(feed)
            logits, *presents = dec.run(None, feed)
            past = dict(zip(past_names, presents))
            step = logits[:, -1:].argmax(-1).astype(np.int64)
    return feeds[:n]


@lru_cache(maxsize=1)
def _decoder_session():
    import onnxruntime as ort

    from zoo.sources import dependency

    return ort.InferenceSession(str(dependency("annalog_decoder")), providers=["CPUExecutionProvider"])


def analogue_start(outputs, feed, steps: int = 8):
    """The encoder's decision: the first tokens of the analogue that the shipped decoder writes
    greedily from its states (the cache carried)."""
    dec = _decoder_session()
    memory = np.asarray(next(iter(outputs.values())))
    mask = feed["attention_mask"]
    past = {i.name: np.zeros((len(memory), HEADS, 0, HEAD), np.float32) for i in dec.get_inputs()
            if i.name.startswith("past_key_values")}
    token, out = np.full((len(memory), 1), 2, np.int64), []
    for _ in range(steps):
        logits, *presents = dec.run(None, {"input_ids": token, "encoder_hidden_states": memory,
                                           "encoder_attention_mask": mask, **past})
        past = dict(zip(past, presents))
        token = logits[:, -1:].argmax(-1).astype(np.int64)
        out.append(token)
    return np.concatenate(out, axis=1).ravel(), False
