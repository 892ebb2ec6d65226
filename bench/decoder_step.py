"""A decoder's step at one token, in each form `quant` can give its MatMul weights, on onnxruntime
CPU and in onnxruntime-web (WASM, headless Chromium): where does 8-bit MatMulNBits pay?

The model is built here: 8 layers of MatMul 576x1536 -> Relu -> MatMul 1536x576 (SmolLM2-135M's
MLP widths, random weights) and a KV-cache input, so that `quant` treats it as a decoder. Forms:
the float model; the int8 default (lean, standard ops); `--target onnxruntime` (8-bit
MatMulNBits, rules.decoder_nbits); `--target onnxruntime --dtype int4` (4-bit MatMulNBits).
Latency: median ms per step (CPU: 200 runs, one thread; web: 60 runs, run.mjs); memory: peak RSS
growth over session creation (CPU), WebAssembly.Memory growth (web).

    .venv/bin/python bench/decoder_step.py [--work build/decoder_step]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "web"))
FORMS = {"float": None, "int8 default": [], "--target onnxruntime": ["--target", "onnxruntime"],
         "--target onnxruntime --dtype int4": ["--target", "onnxruntime", "--dtype", "int4"]}


def decoder_step(path: Path) -> None:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(8):
        inits += [numpy_helper.from_array((rng.standard_normal((576, 1536)) * 0.04).astype(np.float32), f"W{i}a"),
                  numpy_helper.from_array((rng.standard_normal((1536, 576)) * 0.02).astype(np.float32), f"W{i}b")]
        nodes += [helper.make_node("MatMul", [x, f"W{i}a"], [f"h{i}"]), helper.make_node("Relu", [f"h{i}"], [f"r{i}"]),
                  helper.make_node("MatMul", [f"r{i}", f"W{i}b"], [f"y{i}"])]
        x = f"y{i}"
    nodes.append(helper.make_node("Concat", ["past_key", x], ["present_key"], axis=1))
    io = lambda name, dim: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, dim, 576])  # noqa: E731
    graph = helper.make_graph(nodes, "step", [io("x", "s"), io("past_key", "p")], [io(x, "s"), io("present_key", "t")],
                              inits)
    # IR 9: onnxruntime-web 1.30 reads IR 13 at most
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))


def cpu_latency(path: Path, feeds: dict, runs: int = 200) -> float:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(10):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "decoder_step")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.work / "step.onnx"
    decoder_step(src)
    files = {}
    for label, extra in FORMS.items():
        out = src if extra is None else args.work / f"step_{len(files)}.onnx"
        if extra is not None:
            subprocess.run([sys.executable, "-m", "onnxsurgery", "quant", str(src), str(out), "--one-file",
                            *extra], check=True, capture_output=True)
        files[label] = out
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 1, 576)).astype(np.float32),
             "past_key": np.zeros((1, 8, 576), np.float32)}
    from onnxsurgery.running.session_memory import measure_in_fresh_process

    web: dict[str, dict] = {}
    try:
        from browser import run_in_browser

        results = run_in_browser(args.work, [(p.name, feeds) for p in files.values()], runs=60)
        web = {label: r for label, r in zip(files, results) if r.get("ok")}
    except RuntimeError as e:
        print(f"(onnxruntime-web skipped: {e})")
    print(f"\n{'form':36s} {'MB':>6s} {'cpu ms':>7s} {'cpu mem MB':>10s} {'web ms':>7s} {'web mem MB':>10s}")
    for label, path in files.items():
        mem = measure_in_fresh_process(path)["peak_growth"] / 1e6
        w = web.get(label, {})
        print(f"{label:36s} {path.stat().st_size / 1e6:6.1f} {cpu_latency(path, feeds):7.2f} {mem:10.1f} "
              f"{w.get('latency_ms', float('nan')):7.2f} {w.get('memory_growth', float('nan')) / 1e6:10.1f}")


if __name__ == "__main__":
    main()
