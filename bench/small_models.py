"""Small models should cost like small models (issue 49, item 3): every command on a model under
15 MB within 4x onnxruntime's `quantize_dynamic` time and 400 MB of peak anonymous memory.

The model is built in code with the property of the report's speech-quality net: a 1.2 MB conv
net on raw 16 kHz audio with a long input, [1, 144160] (9 s). Each command runs in a fresh
process under bench/memory.py (peak summed RssAnon, wall time), beside `quantize_dynamic` run the
same way on the same model.

    python bench/small_models.py [--out FOLDER] [--repeat 3] [--tree CHECKOUT] [--json]

`--tree` runs the onnxsurgery of another checkout (a worktree of an older commit: before/after
on the same machine, in the same minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from memory import measure  # noqa: E402

SAMPLES = 144160  # 9 s of 16 kHz audio


def speech_net(seed: int = 0, samples: int = SAMPLES, batch: int | str = 1) -> onnx.ModelProto:
    """A conv net on raw audio, [1, samples] -> a score [1, 1], about 300k float32 weights (1.2
    MB) but large activations, as a speech-quality net's: a stride-1 filterbank Conv (64 filters
    of 251 taps: [1, 64, samples], 37 MB), then Conv layers with max pooling, a mean over time and
    two Gemm layers. `batch` a name: a dynamic batch (verification then runs batch 2 too)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(name, shape, scale):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    inits.append(numpy_helper.from_array(np.array([1], np.int64), "channel_axis"))
    nodes.append(helper.make_node("Unsqueeze", ["audio", "channel_axis"], ["x0"]))  # [batch, 1, samples]
    x, channels = "x0", 1
    for i, (out, k, pool) in enumerate(((64, 251, 3), (96, 5, 3), (128, 5, 3), (160, 3, 2), (192, 3, 2))):
        w = weight(f"conv{i}.weight", (out, channels, k), 1 / np.sqrt(channels * k))
        b = weight(f"conv{i}.bias", (out,), 0.01)
        nodes.append(helper.make_node("Conv", [x, w, b], [f"conv{i}"], kernel_shape=[k], pads=[k // 2, k // 2]))
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]))
        nodes.append(helper.make_node("MaxPool", [f"relu{i}"], [f"pool{i}"], kernel_shape=[pool], strides=[pool]))
        x, channels = f"pool{i}", out
    nodes.append(helper.make_node("ReduceMean", [x], ["pooled"], axes=[2], keepdims=0))
    x = "pooled"
    for i, (out, last) in enumerate(((256, False), (1, True))):
        w = weight(f"fc{i}.weight", (out, channels), 1 / np.sqrt(channels))
        b = weight(f"fc{i}.bias", (out,), 0.01)
        nodes.append(helper.make_node("Gemm", [x, w, b], [f"fc{i}"] if not last else ["score"], transB=1))
        if not last:
            nodes.append(helper.make_node("Relu", [f"fc{i}"], [f"fc{i}_relu"]))
            x, channels = f"fc{i}_relu", out
    graph = helper.make_graph(nodes, "speech_net", [helper.make_tensor_value_info("audio", TensorProto.FLOAT,
                                                                                  [batch, samples])],
                              [helper.make_tensor_value_info("score", TensorProto.FLOAT, [batch, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


QUANTIZE_DYNAMIC = ("from onnxruntime.quantization import quantize_dynamic; import sys; "
                    "quantize_dynamic(sys.argv[1], sys.argv[2])")

COMMANDS = {
    "quant": ["quant", "{model}", "{out}"],
    "quant --dtype int4": ["quant", "{model}", "{out}", "--dtype", "int4"],
    "quant --dry-run": ["quant", "{model}", "--dry-run"],
    "shrink": ["shrink", "{model}", "{out}"],
    "shrink --verify": ["shrink", "{model}", "{out}", "--verify"],
    "info": ["info", "{model}"],
    "npy": ["npy", "{model}", "{out}", "--min-bytes", "0"],
    "run": ["run", "{model}"],
    "compare": ["compare", "{model}", "{model}"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the model and outputs [default: a temporary one]")
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the median is reported")
    parser.add_argument("--only", nargs="*", help="command names to run (keys of COMMANDS)")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose onnxsurgery runs")
    parser.add_argument("--dynamic-batch", action="store_true", help="declare the batch dimension dynamic")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="small_models_"))
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "speech_net.onnx"
    onnx.save(speech_net(batch="batch" if args.dynamic_batch else 1), str(model))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(args.tree.resolve()), os.environ.get("PYTHONPATH", "")]))

    def run(cmd):
        runs = [measure(cmd, env=env, cwd=str(folder)) for _ in range(args.repeat)]  # cwd: not a checkout
        bad = [m for m in runs if not m.ok]
        if bad:
            raise SystemExit(f"{' '.join(map(str, cmd))}: exit {bad[0].returncode}\n{bad[0].stderr_tail}")
        return {"wall_s": statistics.median(m.wall for m in runs),
                "peak_anon_mb": statistics.median(m.peak_anon for m in runs) / 1e6}

    rows = {"quantize_dynamic": run([sys.executable, "-c", QUANTIZE_DYNAMIC, str(model), str(folder / "qd.onnx")])}
    base = rows["quantize_dynamic"]["wall_s"]
    for name, template in COMMANDS.items():
        if args.only and name not in args.only:
            continue
        cmd = [sys.executable, "-m", "onnxsurgery", "-q",
               *(a.format(model=model, out=folder / "out.onnx") for a in template)]
        rows[name] = run(cmd)
    for row in rows.values():
        row["x_quantize_dynamic"] = row["wall_s"] / base
    if args.json:
        print(json.dumps({"model_mb": model.stat().st_size / 1e6, "rows": rows}, indent=2))
        return
    batch = "batch" if args.dynamic_batch else 1
    print(f"speech_net.onnx {model.stat().st_size / 1e6:.2f} MB, input [{batch}, {SAMPLES}], median of {args.repeat}, "
          f"onnxsurgery of {args.tree.resolve()}")
    print(f"{'command':<22} {'wall s':>7} {'x qd':>6} {'peak anon MB':>13}")
    for name, row in rows.items():
        print(f"{name:<22} {row['wall_s']:7.2f} {row['x_quantize_dynamic']:6.1f} {row['peak_anon_mb']:13.0f}")


if __name__ == "__main__":
    main()
