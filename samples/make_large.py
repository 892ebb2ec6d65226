"""Build a transformer-like model larger than 4 GB, in code, with external data and duplicated
weights, without holding it in memory: each weight is written straight into `large.data`.

`--layers` blocks of attention-like projections (4 x [H, H]) and a feed-forward pair ([H, 4H],
[4H, H]) with residual Adds; the blocks cycle through `--distinct` weight sets, each written
again under new names per layer (the way exporters of shared-weight models wrote them), so that
`shrink` has most of the file to merge. Default: H 1024, 84 layers, 4 distinct sets: 4.2 GB.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path
from external_data import DataFileWriter  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("build/large"))
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=84)
    ap.add_argument("--distinct", type=int, default=4)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model_path, data_path = args.out / "large.onnx", args.out / "large.data"
    h = args.hidden
    shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "o": (h, h), "ffn1": (h, 4 * h), "ffn2": (4 * h, h)}
    rng = np.random.default_rng(0)
    sets = [{k: (rng.standard_normal(s, dtype=np.float32) * 0.02) for k, s in shapes.items()}
            for _ in range(args.distinct)]
    nodes = []
    with DataFileWriter(data_path) as data:
        x = "x"
        for layer in range(args.layers):
            w = sets[layer % args.distinct]
            p = f"layer{layer}"
            q, k, v = (f"{p}_{n}" for n in "qkv")
            for n, out in (("q", q), ("k", k), ("v", v)):
                nodes.append(helper.make_node("MatMul", [x, data.add(f"{p}.{n}", w[n]).name], [out]))
            mix = f"{p}_mix"
            nodes.append(helper.make_node("Sum", [q, k, v], [mix]))
            att = f"{p}_att"
            nodes.append(helper.make_node("MatMul", [mix, data.add(f"{p}.o", w["o"]).name], [att]))
            res = f"{p}_res"
            nodes.append(helper.make_node("Add", [x, att], [res]))
            up, act, down = f"{p}_up", f"{p}_act", f"{p}_down"
            nodes.append(helper.make_node("MatMul", [res, data.add(f"{p}.ffn1", w["ffn1"]).name], [up]))
            nodes.append(helper.make_node("Relu", [up], [act]))
            nodes.append(helper.make_node("MatMul", [act, data.add(f"{p}.ffn2", w["ffn2"]).name], [down]))
            x = f"{p}_out"
            nodes.append(helper.make_node("Add", [res, down], [x]))
    graph = helper.make_graph(nodes, "large", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, h])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 16, h])], data.tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model_path.write_bytes(model.SerializeToString())
    print(f"{model_path}: {(model_path.stat().st_size + data_path.stat().st_size) / 1e9:.2f} GB "
          f"({args.layers} layers, {args.distinct} distinct weight sets)")


if __name__ == "__main__":
    main()
