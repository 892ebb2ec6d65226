"""Two forms of a zoo model's lean Conv weights ranked three ways (issue 55): in the weight (what
the data-free default measures), in the layer's output on the zoo's tune set (the true
activations), and in the layer's output on generated inputs (running/feeds.make_inputs, seeds
0-1: what a data-free measure could run). Forms: the lean one (`scaled`, per output channel, input
rows equalized, zero points) against `scaled_input` (per input channel, zero points), the pair
lean.py's INPUT_FORM_MARGIN decides in the weight. Each line: lean error / input form error by
each measure (above 1: the input form loses less), and onnx-shrink-ray's axis for the weight where
--sr-axes gives them (bench/shrink_ray_swaps.shrink_ray_axes, as JSON). The last lines: on how many
weights the weight's and the generated inputs' ranking agree with the tune set's, and the names
of those the generated inputs put at or above --at (a `--change` for bench/paired_draws.py).

    python bench/layer_forms.py terrain_diffusion
    python bench/layer_forms.py terrain_diffusion --at 1.0 --spec /tmp/spec.txt
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decision_effects import ROOT, ZOO, feeds, inputs_dir  # noqa: E402

sys.path.insert(0, str(ROOT))
import onnx_graphsurgeon as gs  # noqa: E402

from onnxsurgery.graph_utils import collect_constants, consumers, read_values  # noqa: E402
from onnxsurgery.quantization.options import QuantOptions, Scheme  # noqa: E402
from onnxsurgery.quantization.quantize import quantize_site, scheme_args  # noqa: E402
from onnxsurgery.quantization.rounding import weight_error  # noqa: E402
from onnxsurgery.running.feeds import make_inputs  # noqa: E402

FORMS = {"lean": (Scheme("channel", 0), "scaled", False), "input": (Scheme("channel", 1), "scaled_input", False)}
INPUT_FORM = {"lowering": "scaled_input", "axis": 1, "symmetric": False, "granularity": "channel", "block_size": None}


def reader(site):
    """The node reading `site` as its weight, through Casts."""
    todo = list(consumers(site))
    while todo:
        node, _ = todo.pop()
        if node.op != "Cast":
            return node
        todo += [(n, 1) for n in node.outputs[0].outputs]
    return None


def captured(path: Path, names: list[str], samples: list[dict]) -> list[dict[str, np.ndarray]]:
    """Each sample's values of `names` (float32 tensors inside the model)."""
    model = onnx.load(str(path))
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in names if n not in have)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [dict(zip(names, sess.run(names, s))) for s in samples]


def conv_outputs(node, xs: list[np.ndarray], weight: np.ndarray) -> list[np.ndarray]:
    """`node`'s Conv (no bias) of each of `xs` with `weight`, in float64."""
    conv = helper.make_node("Conv", ["x", "w"], ["y"], **dict(node.attrs))
    graph = helper.make_graph([conv], "layer", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [sess.run(None, {"x": x.astype(np.float32)})[0].astype(np.float64) for x in xs]


def rel(outs: list[np.ndarray], refs: list[np.ndarray]) -> float:
    return float(np.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(outs, refs)) / sum((b ** 2).sum() for b in refs)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a zoo model name (zoo/models.py)")
    ap.add_argument("--sr-axes", help="JSON {weight: axis} of onnx-shrink-ray's file")
    ap.add_argument("--at", type=float, default=1.0, help="the generated inputs' ratio that --spec takes")
    ap.add_argument("--spec", help="write the weights at or above --at as a paired_draws --change here")
    ap.add_argument("--zoo-inputs", help="as bench/decision_effects.py's")
    args = ap.parse_args(argv)
    path = ZOO / "models" / f"{args.model}.onnx"
    plan = json.loads(subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(path), "--dry-run",
                                      "--json"], cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    lean = {w["name"] for w in plan["weights"] if w["lowering"] == "scaled"}
    axes = json.loads(Path(args.sr_axes).read_text()) if args.sr_axes else {}
    graph = gs.import_onnx(onnx.load(str(path)))
    sites = [s for s in collect_constants(graph) if s.name in lean and len(s.shape) >= 3 and s.shape[1] >= 16]
    sites = [s for s in sites if (node := reader(s)) is not None and node.op == "Conv"]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sets = {"tune": feeds(inputs_dir(args.model, args.zoo_inputs) / "tune.npz"),
            "gen": [make_inputs(sess, seed=s, model=str(path)) for s in range(2)]}
    names = sorted({reader(s).inputs[0].name for s in sites})
    acts = {k: captured(path, names, v) for k, v in sets.items()}
    options = QuantOptions()
    ratios = []
    print("lean / input form error: weight  tune  generated  (shrink-ray axis)  weight")
    for site in sites:
        node = reader(site)
        values = read_values(site.tensor).astype(np.float32)
        xs = {k: [a[node.inputs[0].name] for a in v] for k, v in acts.items()}
        refs = {k: conv_outputs(node, x, values) for k, x in xs.items()}
        err: dict = {}
        for form, (scheme, lowering, symmetric) in FORMS.items():
            qt = quantize_site(values, site, scheme, lowering, True, scheme_args(options, scheme, lowering, symmetric))
            err[form, "weight"] = weight_error(values, qt)["rel_l2_error"]
            deq = qt.dequantize().astype(np.float32)
            for k, x in xs.items():
                err[form, k] = rel(conv_outputs(node, x, deq), refs[k])
        r = {k: err["lean", k] / max(err["input", k], 1e-30) for k in ("weight", "tune", "gen")}
        ratios.append((site.name, r))
        print(f"{r['weight']:.3f}  {r['tune']:.3f}  {r['gen']:.3f}  ({axes.get(site.name, '-')})  {site.name} "
              f"{list(site.shape)}", flush=True)
    if ratios:
        sides = {k: np.array([r[k] >= 1.0 for _, r in ratios]) for k in ("weight", "tune", "gen")}
        agree = {k: int((sides[k] == sides["tune"]).sum()) for k in ("weight", "gen")}
        print(f"{len(ratios)} weights; the side of 1.0 agrees with the tune set's: in the weight on "
              f"{agree['weight']}, generated on {agree['gen']}")
        taken = [n for n, r in ratios if r["gen"] >= args.at]
        print(f"generated at or above {args.at}: {len(taken)}: " + " ".join(taken))
        if args.spec:
            Path(args.spec).write_text(";".join(f"^{n}={json.dumps(INPUT_FORM)}" for n in taken))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
