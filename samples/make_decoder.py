"""Build a Llama-shaped decoder of any size in standard ONNX ops, its random weights streamed
straight into one external-data file (never the whole model in memory).

The graph, as exporters write it (opset 17 by default, `--opset` 13 and up):

- `input_ids` [batch_size, sequence_length] int64 -> Gather on the token table [vocab, hidden];
- per layer: RMSNorm (x*x, ReduceMean, Add eps, Sqrt, Div, Mul weight), q/k/v MatMuls, rotary
  position embedding (`--rotary`: cos/sin tables [max_positions, head_size] as constants,
  gathered by `position_ids`, rotate_half by Split/Neg/Concat), attention with a causal mask that
  also honours `attention_mask` (Where -> Add -> Softmax), grouped-query attention when
  `--kv-heads` < `--heads` (queries reshaped [batch, kv_heads, group, seq, head_size] against
  keys [batch, kv_heads, 1, total, head_size]: MatMul broadcasts, so no Expand), the o MatMul
  and a residual Add; then RMSNorm and a SwiGLU MLP (gate and up MatMuls, SiLU as
  gate * Sigmoid(gate), down MatMul) and a residual Add;
- final RMSNorm and the lm_head: `--untied` a MatMul on its own [hidden, vocab] weight, `--tied`
  a MatMul on Transpose(token table) (the form onnxsurgery's `tied` lowering reads).
- `--kv-cache`: inputs `past_key_values.{i}.key|value` [batch_size, kv_heads,
  past_sequence_length, head_size] and outputs `present.{i}.key|value` [batch_size, kv_heads,
  total_sequence_length, head_size] (optimum's names; head count and size are fixed numbers),
  `attention_mask` is [batch_size, total_sequence_length]; without, [batch_size,
  sequence_length]. A config.json beside the model says the sizes (transformers' keys).

Weights are stored the way exporters store them, [in, out] for MatMul, with HF-like names
(`model.layers.0.self_attn.q_proj.weight`). `--dtype float16` computes in float16 throughout
(inputs, cache and logits included); `--dtype bfloat16` stores every weight in bfloat16 and
Casts it to float32 where it is read (onnxruntime's CPU provider has no bfloat16 arithmetic), so
the activations, the cache and the logits are float32.

Random weights: matrices normal with std 0.02 (`--init uniform`: uniform with the same std,
about 5x faster to draw), norm weights 1 + 0.02 noise, so that every weight is distinct (nothing
for `shrink` to merge) and the logits are finite. Each tensor is drawn in chunks, each from its
own seed, on `--threads` threads, and written as it comes at 4096-byte-aligned offsets (so that
onnxruntime can memory-map the file): memory stays at a few chunks (32 MB each) whatever the
size, and the output is the same for any thread count.

Presets (`--size`; explicit options override): tiny (2 layers, hidden 64, vocab 256),
1.4b (24 layers, hidden 2048, MLP 5632, 16 heads, vocab 32000, untied: 1.36B parameters, 5.46 GB
fp32), 6.7b (32 layers, hidden 4096, MLP 11008, 32 heads, vocab 32000, untied: 6.74B, 27 GB fp32).

    python samples/make_decoder.py --size 1.4b --out build/decoder-1.4b
    python samples/make_decoder.py --size tiny --kv-heads 2 --tied --dtype float16 --out build/tiny

Output: OUT/model.onnx, OUT/model.onnx.data, OUT/config.json. To run a big one with little
memory, give onnxruntime `session.disable_prepacking` = "1" (it then reads the weights in place
from the mapped file).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path (tests, bench)
from external_data import DataFileWriter  # noqa: E402
from random_weights import DTYPES, ITEMSIZE, STD, WeightFile  # noqa: E402, F401 (ITEMSIZE: bench/streaming.py)


PRESETS = {
    "tiny": dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=4, vocab=256, max_positions=256),
    "1.4b": dict(hidden=2048, intermediate=5632, layers=24, heads=16, kv_heads=16, vocab=32000, max_positions=4096),
    "6.7b": dict(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, vocab=32000, max_positions=4096),
}
DEFAULTS = dict(dtype="float32", rotary=True, tied=False, kv_cache=True, opset=17, eps=1e-5, rope_theta=10000.0,
                init="normal", seed=0)


@dataclass
class Config:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    max_positions: int = 4096
    dtype: str = "float32"
    rotary: bool = True
    tied: bool = False
    kv_cache: bool = True
    opset: int = 17
    eps: float = 1e-5
    rope_theta: float = 10000.0
    init: str = "normal"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv-heads {self.kv_heads}")
        if self.rotary and self.head_size % 2:
            raise ValueError(f"rotary needs an even head size, not {self.head_size}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype}: expected one of {', '.join(DTYPES)}")
        if self.opset < 13:
            raise ValueError("opset 13 or later")

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads

    @property
    def parameters(self) -> int:
        h, i, hd = self.hidden, self.intermediate, self.head_size
        layer = h * self.heads * hd * 2 + h * self.kv_heads * hd * 2 + 3 * h * i + 2 * h
        return self.layers * layer + self.vocab * h * (1 if self.tied else 2) + h


def config_from(size: str | None = None, **options) -> Config:
    """A Config from a preset (`size`) with `options` (None values ignored) over it."""
    values = dict(DEFAULTS)
    values.update(PRESETS[size or "tiny"])
    values.update({k: v for k, v in options.items() if v is not None})
    return Config(**values)


# --- the graph ------------------------------------------------------------------------------

class _Builder:
    def __init__(self, cfg: Config, weights: WeightFile):
        self.cfg, self.weights = cfg, weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.small: dict = {}
        self.count = 0
        self.compute = TensorProto.FLOAT16 if cfg.dtype == "float16" else TensorProto.FLOAT
        self.np_compute = np.float16 if cfg.dtype == "float16" else np.float32

    def name(self, hint: str) -> str:
        self.count += 1
        return f"/{hint}_{self.count}"

    def node(self, op: str, inputs, hint: str | None = None, outputs: int | list[str] = 1, **attrs):
        if isinstance(outputs, int):
            outputs = [self.name(f"{hint or op}/out{i}") for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), outputs, name=self.name(hint or op), **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def const(self, values, dtype=None) -> str:
        """A small initializer kept in the .onnx (shapes, axes, scalars), shared by value."""
        array = np.asarray(values, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self.small:
            name = f"const_{len(self.small)}"
            self.inits.append(onnx.numpy_helper.from_array(array, name))
            self.small[key] = name
        return self.small[key]

    def weight(self, name: str, shape, *, std: float = STD, mean: float = 0.0, array=None, cast: bool = True) -> str:
        """An external weight; under bfloat16 read through a Cast to float32 (unless `cast` is
        False: the caller casts what it takes)."""
        self.inits.append(self.weights.add(name, shape, self.cfg.dtype, std=std, mean=mean, array=array))
        if self.cfg.dtype == "bfloat16" and cast:
            return self.node("Cast", [name], f"{name}/Cast", to=TensorProto.FLOAT)
        return name

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        return self.node("Unsqueeze", [x, self.const(axes, np.int64)])

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.node("Reshape", [x, self.const(shape, np.int64)])

    def rms_norm(self, x: str, weight_name: str) -> str:
        cfg = self.cfg
        square = self.node("Mul", [x, x], f"{weight_name}/Square")
        if cfg.opset >= 18:
            mean = self.node("ReduceMean", [square, self.const([-1], np.int64)], keepdims=1)
        else:
            mean = self.node("ReduceMean", [square], axes=[-1], keepdims=1)
        eps = self.node("Add", [mean, self.const(cfg.eps, self.np_compute)])
        root = self.node("Sqrt", [eps])
        normed = self.node("Div", [x, root])
        w = self.weight(weight_name, [cfg.hidden], std=STD, mean=1.0)
        return self.node("Mul", [normed, w])

    def heads(self, x: str, weight_name: str, count: int) -> str:
        """x @ W, as [batch, count, seq, head_size]."""
        hd = self.cfg.head_size
        y = self.node("MatMul", [x, self.weight(weight_name, [self.cfg.hidden, count * hd])])
        return self.node("Transpose", [self.reshape(y, [0, 0, count, hd])], perm=[0, 2, 1, 3])

    def rotate(self, x: str, cos: str, sin: str) -> str:
        half = self.cfg.head_size // 2
        x1, x2 = self.node("Split", [x, self.const([half, half], np.int64)], "rotary/Split", outputs=2, axis=-1)
        rotated = self.node("Concat", [self.node("Neg", [x2]), x1], axis=-1)
        return self.node("Add", [self.node("Mul", [x, cos]), self.node("Mul", [rotated, sin])])

    def build(self) -> onnx.ModelProto:
        cfg = self.cfg
        h, hd, nh, nkv = cfg.hidden, cfg.head_size, cfg.heads, cfg.kv_heads
        group = nh // nkv
        total = "total_sequence_length" if cfg.kv_cache else "sequence_length"
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
                  helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", total]),
                  helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
        outputs = [helper.make_tensor_value_info("logits", self.compute, ["batch_size", "sequence_length", cfg.vocab])]

        # the token table, read by Gather (and by a tied lm_head)
        table = self.weight("model.embed_tokens.weight", [cfg.vocab, h], cast=False)
        x = self.node("Gather", [table, "input_ids"], "embed_tokens", axis=0)
        if cfg.dtype == "bfloat16":
            x = self.node("Cast", [x], to=TensorProto.FLOAT)

        # the additive mask [batch, 1, 1, seq, total]: -inf-like past the query's position or padded
        i0, i1 = self.const(0, np.int64), self.const(1, np.int64)
        seq = self.node("Gather", [self.node("Shape", ["input_ids"]), i1], axis=0)
        tot = self.node("Gather", [self.node("Shape", ["attention_mask"]), i1], axis=0)
        past = self.node("Sub", [tot, seq])
        query_pos = self.unsqueeze(self.node("Range", [past, tot, i1]), [1])
        key_pos = self.node("Range", [i0, tot, i1])
        future = self.node("Less", [query_pos, key_pos])  # [seq, total]
        padded = self.unsqueeze(self.node("Equal", ["attention_mask", i0]), [1, 2])  # [batch, 1, 1, total]
        hidden_keys = self.node("Or", [future, padded])  # [batch, 1, seq, total]
        low = float(np.finfo(self.np_compute).min)
        bias = self.node("Where", [hidden_keys, self.const(low, self.np_compute), self.const(0, self.np_compute)],
                         "attention_bias")
        bias = self.unsqueeze(bias, [1])
        scale = self.const(1 / math.sqrt(hd), self.np_compute)

        if cfg.rotary:
            positions = np.arange(cfg.max_positions, dtype=np.float64)
            inv_freq = 1.0 / cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
            angles = np.outer(positions, inv_freq)
            angles = np.concatenate([angles, angles], axis=-1)
            cos_t = self.weight("rotary.cos_cached", angles.shape, array=np.cos(angles), cast=False)
            sin_t = self.weight("rotary.sin_cached", angles.shape, array=np.sin(angles), cast=False)
            cos = self.node("Gather", [cos_t, "position_ids"], axis=0)  # [batch, seq, head_size]
            sin = self.node("Gather", [sin_t, "position_ids"], axis=0)
            if cfg.dtype == "bfloat16":
                cos = self.node("Cast", [cos], to=TensorProto.FLOAT)
                sin = self.node("Cast", [sin], to=TensorProto.FLOAT)
            cos, sin = self.unsqueeze(cos, [1]), self.unsqueeze(sin, [1])  # [batch, 1, seq, head_size]

        for i in range(cfg.layers):
            p = f"model.layers.{i}"
            normed = self.rms_norm(x, f"{p}.input_layernorm.weight")

            q, k, v = (self.heads(normed, f"{p}.self_attn.{proj}.weight", count)
                       for proj, count in (("q_proj", nh), ("k_proj", nkv), ("v_proj", nkv)))
            if cfg.rotary:
                q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            if cfg.kv_cache:
                shape = ["batch_size", nkv, "past_sequence_length", hd]
                present = ["batch_size", nkv, "total_sequence_length", hd]
                for kind, new in (("key", k), ("value", v)):
                    inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", self.compute, shape))
                    outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", self.compute, present))
                    self.node("Concat", [f"past_key_values.{i}.{kind}", new], f"{p}/{kind}_cache",
                              outputs=[f"present.{i}.{kind}"], axis=2)
                k, v = f"present.{i}.key", f"present.{i}.value"
            q5 = self.reshape(q, [0, nkv, group, -1, hd])  # [batch, kv_heads, group, seq, head_size]
            k5, v5 = self.unsqueeze(k, [2]), self.unsqueeze(v, [2])  # [batch, kv_heads, 1, total, head_size]
            scores = self.node("MatMul", [q5, self.node("Transpose", [k5], perm=[0, 1, 2, 4, 3])])
            scores = self.node("Add", [self.node("Mul", [scores, scale]), bias])
            probs = self.node("Softmax", [scores], axis=-1)
            context = self.reshape(self.node("MatMul", [probs, v5]), [0, nh, -1, hd])
            context = self.reshape(self.node("Transpose", [context], perm=[0, 2, 1, 3]), [0, 0, nh * hd])
            attn = self.node("MatMul", [context, self.weight(f"{p}.self_attn.o_proj.weight", [nh * hd, h])])
            x = self.node("Add", [x, attn], f"{p}/residual_attn")

            normed = self.rms_norm(x, f"{p}.post_attention_layernorm.weight")
            gate = self.node("MatMul", [normed, self.weight(f"{p}.mlp.gate_proj.weight", [h, cfg.intermediate])])
            up = self.node("MatMul", [normed, self.weight(f"{p}.mlp.up_proj.weight", [h, cfg.intermediate])])
            act = self.node("Mul", [self.node("Mul", [gate, self.node("Sigmoid", [gate])]), up])
            down = self.node("MatMul", [act, self.weight(f"{p}.mlp.down_proj.weight", [cfg.intermediate, h])])
            x = self.node("Add", [x, down], f"{p}/residual_mlp")

        x = self.rms_norm(x, "model.norm.weight")
        if cfg.tied:
            head = self.node("Transpose", [table], "lm_head/Transpose", perm=[1, 0])
            if cfg.dtype == "bfloat16":
                head = self.node("Cast", [head], to=TensorProto.FLOAT)
        else:
            head = self.weight("lm_head.weight", [h, cfg.vocab])
        self.node("MatMul", [x, head], "lm_head", outputs=["logits"])

        graph = helper.make_graph(self.nodes, "decoder", inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cfg.opset)],
                                  producer_name="onnxsurgery samples/make_decoder.py")
        model.ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", cfg.opset)])
        return model


def build(cfg: Config, out: Path, *, threads: int = 2, progress: bool = False) -> Path:
    """Write OUT/model.onnx, OUT/model.onnx.data and OUT/config.json for `cfg`; the model's path."""
    out.mkdir(parents=True, exist_ok=True)
    model_path, data_path = out / "model.onnx", out / "model.onnx.data"
    tmp_model, tmp_data = model_path.with_suffix(".onnx.tmp"), data_path.with_name(data_path.name + ".tmp")
    try:
        with DataFileWriter(tmp_data, data_path.name) as data:
            weights = WeightFile(data, init=cfg.init, seed=cfg.seed)
            model = _Builder(cfg, weights).build()
            weights.write(threads=threads, progress=progress)
        tmp_model.write_bytes(model.SerializeToString())
        os.replace(tmp_data, data_path)
        os.replace(tmp_model, model_path)
    finally:
        for path in (tmp_data, tmp_model):
            path.unlink(missing_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.hidden,
              "intermediate_size": cfg.intermediate, "num_hidden_layers": cfg.layers,
              "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_size,
              "vocab_size": cfg.vocab, "max_position_embeddings": cfg.max_positions, "rms_norm_eps": cfg.eps,
              "rope_theta": cfg.rope_theta, "tie_word_embeddings": cfg.tied, "use_cache": cfg.kv_cache,
              "torch_dtype": cfg.dtype, "rotary": cfg.rotary}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return model_path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(PRESETS), default="tiny", help="preset (default tiny)")
    ap.add_argument("--out", type=Path, default=None, help="folder (default build/decoder-SIZE)")
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--intermediate", type=int, help="MLP size")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int, help="fewer than --heads: grouped-query attention")
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--max-positions", type=int, help="rows of the rotary tables")
    ap.add_argument("--dtype", choices=sorted(DTYPES))
    ap.add_argument("--rotary", action=argparse.BooleanOptionalAction, default=None, help="(default on)")
    ap.add_argument("--tied", action=argparse.BooleanOptionalAction, default=None,
                    help="--tied: lm_head reads the token table; --no-tied/--untied: its own (default)")
    ap.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--kv-cache", action=argparse.BooleanOptionalAction, default=None, help="(default on)")
    ap.add_argument("--opset", type=int, help="(default 17)")
    ap.add_argument("--init", choices=["normal", "uniform"], help="weight distribution (default normal)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1), help="drawing threads")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    keys = ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab", "max_positions", "dtype", "rotary",
            "tied", "kv_cache", "opset", "init", "seed")
    options = {k: getattr(args, k) for k in keys}
    if args.heads is not None and args.kv_heads is None:
        options["kv_heads"] = args.heads
    try:
        cfg = config_from(args.size, **options)
    except ValueError as e:
        ap.error(str(e))
    out = args.out or Path("build") / f"decoder-{args.size}"
    t0 = time.perf_counter()
    path = build(cfg, out, threads=args.threads, progress=not args.quiet)
    size = path.stat().st_size + (out / "model.onnx.data").stat().st_size
    seconds = time.perf_counter() - t0
    if not args.quiet:
        count = f"{cfg.parameters / 1e9:.2f}B" if cfg.parameters >= 1e9 else f"{cfg.parameters / 1e6:.1f}M"
        print(f"{path}: {count} parameters, {size / 1e9:.2f} GB {cfg.dtype} "
              f"({cfg.layers} layers, hidden {cfg.hidden}, MLP {cfg.intermediate}, heads {cfg.heads}/{cfg.kv_heads}, "
              f"vocab {cfg.vocab}, {'tied' if cfg.tied else 'untied'}, {'rotary' if cfg.rotary else 'no rotary'}, "
              f"{'KV cache' if cfg.kv_cache else 'no cache'}) in {seconds:.1f} s, {size / 1e6 / seconds:.0f} MB/s")


if __name__ == "__main__":
    main()
