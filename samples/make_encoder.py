"""Build BERT/ALBERT-like encoder classifiers in code, with random weights and no download.

Writes two models of the same architecture and size into --out:
- encoder_shared.onnx: ALBERT-style, all layers share one set of weights, but the export
  writes that set once per layer under new names, the way older exporters did;
- encoder_unique.onnx: every layer has its own weights (nothing to merge).

Default: 12 layers of hidden size 768 (~350 MB each). --layers/--hidden make smaller ones.
The graph is what an opset-14 exporter writes: Gather embeddings, a factorised embedding
projection, attention with MatMul/Softmax, LayerNorm decomposed into ReduceMean/Sqrt/Div, and
per-layer shape constants as Constant nodes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 14
IR_VERSION = 7


class Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, name: str, shape, scale=0.02, value: np.ndarray | None = None) -> str:
        if value is None:
            value = (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.nodes.append(helper.make_node("Constant", [], [name], name=name + "_node",
                                           value=numpy_helper.from_array(value, name)))
        return name

    def op(self, op_type: str, inputs: list[str], prefix: str, **attrs) -> str:
        self.count += 1
        out = f"{prefix}/{op_type}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def layer_norm(self, x: str, prefix: str, gamma: str, beta: str) -> str:
        mean = self.op("ReduceMean", [x], prefix, axes=[-1])
        centered = self.op("Sub", [x, mean], prefix)
        sq = self.op("Pow", [centered, self.const(f"{prefix}/two", np.array(2.0, np.float32))], prefix)
        var = self.op("ReduceMean", [sq], prefix, axes=[-1])
        eps = self.const(f"{prefix}/eps", np.array(1e-12, np.float32))
        std = self.op("Sqrt", [self.op("Add", [var, eps], prefix)], prefix)
        normed = self.op("Div", [centered, std], prefix)
        return self.op("Add", [self.op("Mul", [normed, gamma], prefix), beta], prefix)


def layer_weights(b: Builder, prefix: str, hidden: int, ffn: int,
                  values: dict[str, np.ndarray] | None) -> dict[str, str]:
    shapes = {
        "q_w": (hidden, hidden), "q_b": (hidden,), "k_w": (hidden, hidden), "k_b": (hidden,),
        "v_w": (hidden, hidden), "v_b": (hidden,), "o_w": (hidden, hidden), "o_b": (hidden,),
        "ln1_g": (hidden,), "ln1_b": (hidden,), "ffn1_w": (hidden, ffn), "ffn1_b": (ffn,),
        "ffn2_w": (ffn, hidden), "ffn2_b": (hidden,), "ln2_g": (hidden,), "ln2_b": (hidden,),
    }
    names = {}
    for key, shape in shapes.items():
        value = None if values is None else values[key]
        if value is None and key.startswith("ln") and key.endswith("_g"):
            value = np.ones(shape, np.float32) + b.rng.standard_normal(shape, dtype=np.float32) * 0.01
        names[key] = b.weight(f"{prefix}.{key}", shape, value=value)
    return names


def project_heads(b: Builder, x: str, weight: str, bias: str, split: str, prefix: str) -> str:
    """x @ W + b, split into heads: [batch, heads, seq, head_dim]."""
    h = b.op("Add", [b.op("MatMul", [x, weight], prefix), bias], prefix)
    return b.op("Transpose", [b.op("Reshape", [h, split], prefix)], prefix, perm=[0, 2, 1, 3])


def build(layers: int, hidden: int, shared: bool, vocab: int = 30000, embed: int = 128,
          seed: int = 0) -> onnx.ModelProto:
    heads = max(1, hidden // 64)
    ffn = hidden * 4
    b = Builder(seed)
    word = b.weight("embeddings.word", (vocab, embed))
    pos = b.weight("embeddings.position", (512, embed))
    x = b.op("Gather", [word, "input_ids"], "embeddings", axis=0)
    x = b.op("Add", [x, b.op("Slice", [pos, b.const("embeddings/start", np.array([0], np.int64)),
                                       b.const("embeddings/end", np.array([128], np.int64)),
                                       b.const("embeddings/axes", np.array([0], np.int64))],
                             "embeddings")], "embeddings")
    x = b.op("MatMul", [x, b.weight("embeddings.projection", (embed, hidden))], "embeddings")

    first: dict[str, np.ndarray] | None = None
    for layer in range(layers):
        p = f"encoder.layer.{layer}"
        w = layer_weights(b, p, hidden, ffn, first if shared else None)
        if shared and first is None:
            first = {k: numpy_helper.to_array(t) for t, k in zip(b.inits[-len(w):], w)}
        split = b.const(f"{p}/heads_shape", np.array([0, -1, heads, hidden // heads], np.int64))
        merge = b.const(f"{p}/merge_shape", np.array([0, -1, hidden], np.int64))

        q, k, v = (project_heads(b, x, w[f"{kind}_w"], w[f"{kind}_b"], split, p) for kind in "qkv")
        kt = b.op("Transpose", [k], p, perm=[0, 1, 3, 2])
        scores = b.op("Div", [b.op("MatMul", [q, kt], p),
                              b.const(f"{p}/scale", np.array(np.sqrt(hidden // heads), np.float32))], p)
        ctx = b.op("MatMul", [b.op("Softmax", [scores], p, axis=-1), v], p)
        ctx = b.op("Reshape", [b.op("Transpose", [ctx], p, perm=[0, 2, 1, 3]), merge], p)
        attn = b.op("Add", [b.op("MatMul", [ctx, w["o_w"]], p), w["o_b"]], p)
        x = b.layer_norm(b.op("Add", [x, attn], p), p + "/ln1", w["ln1_g"], w["ln1_b"])
        h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w["ffn1_w"]], p), w["ffn1_b"]], p)], p)
        h = b.op("Add", [b.op("MatMul", [h, w["ffn2_w"]], p), w["ffn2_b"]], p)
        x = b.layer_norm(b.op("Add", [x, h], p), p + "/ln2", w["ln2_g"], w["ln2_b"])

    cls = b.op("Gather", [x, b.const("pooler/cls_index", np.array(0, np.int64))], "pooler", axis=1)
    pooled = b.op("Tanh", [b.op("Add", [b.op("MatMul", [cls, b.weight("pooler.w", (hidden, hidden))],
                                             "pooler"), b.weight("pooler.b", (hidden,))], "pooler")],
                  "pooler")
    logits = b.op("Add", [b.op("MatMul", [pooled, b.weight("classifier.w", (hidden, 2))], "head"),
                          b.weight("classifier.b", (2,))], "head")
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"]))

    graph = helper.make_graph(
        b.nodes, "encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", 128])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
        initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="onnxsurgery-samples")
    model.ir_version = IR_VERSION
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("build/samples"))
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--only", choices=["shared", "unique"], help="build just one of the two")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for kind in ("shared", "unique"):
        if args.only and kind != args.only:
            continue
        path = args.out / f"encoder_{kind}.onnx"
        tag = path.with_suffix(".params")
        params = f"{args.layers}x{args.hidden}"
        if path.exists() and tag.exists() and tag.read_text() == params:
            print(f"{path}: up to date ({path.stat().st_size / 1e6:.1f} MB)")
            continue
        model = build(args.layers, args.hidden, shared=(kind == "shared"))
        onnx.save(model, str(path))
        tag.write_text(params)
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB, {args.layers} layers, hidden {args.hidden}")


if __name__ == "__main__":
    main()
