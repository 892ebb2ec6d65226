"""Benchmark `onnxsurgery quant` against onnx_shrink_ray and onnxruntime's quantize_dynamic.

For each model and tool: processing wall time and peak RSS (tool process), output size (raw,
gzip, brotli) as a share of the input, output error against the original on the same inputs
(worst relative L2 over outputs, argmax agreement on the last axis), and onnxruntime latency
relative to the original's: the median of 30 ratios, the two run alternately in one process.

Inputs: token ids for the encoder and BERT; lines of English words rendered with Pillow's
font (normalised as PP-OCR does; the recognizer reads them correctly) for the OCR models; 64
samples each (with 16, the argmax figure moves by a few tenths of a percent between sample
sets). The --calibration rows fit their rounding to 16 further samples (other seeds), so their
figures are on inputs they did not see.

Peak memory is given twice: the tool process's peak RSS over the input size, and the same after
subtracting the tool's peak on a tiny model (interpreter, imports, onnxruntime), which for
files of a few MB is most of the figure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "bench"))
from run import fetch_rapidocr, run_measured  # noqa: E402

OCR_SHAPES = {"det": (1, 3, 320, 320), "rec": (1, 3, 48, 320), "cls": (1, 3, 48, 192)}


WORDS = ["onnx", "model", "surgery", "weights", "Hello", "World", "2026", "quant", "phone", "edge",
         "browser", "download", "ALBERT", "layer", "shared", "tensor", "scale", "block", "int8"]


def text_image(shape, seed):
    """Black text rendered on white with Pillow's bundled font, normalised as PP-OCR does."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    _, _, h, w = shape
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    line_h = min(h, 48)
    font = ImageFont.load_default(size=int(line_h * 0.6))
    for y in range(0, h - line_h + 1, line_h):
        draw.text((4, y + line_h // 6), " ".join(rng.choice(WORDS, 3)), fill="black", font=font)
    x = np.asarray(img, np.float32).transpose(2, 0, 1)[None] / 255.0
    return ((x - 0.5) / 0.5).astype(np.float32)


def samples_for(model: Path, n=64, first=0):
    """n samples for a model, from seeds first, first + 1, ... (calibration uses other seeds)."""
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    seeds = range(first, first + n)
    if "encoder" in model.name:
        return [{inp.name: np.random.default_rng(s).integers(0, 30000, (1, 128)).astype(np.int64)} for s in seeds]
    if "bert" in model.name:
        return [{"input_ids": np.random.default_rng(s).integers(0, 30522, (1, 64)).astype(np.int64),
                 "attention_mask": np.ones((1, 64), np.int64)} for s in seeds]
    if model.name == "tiny.onnx":
        return [{inp.name: np.random.default_rng(s).standard_normal((1, 64)).astype(np.float32)} for s in seeds]
    kind = next(k for k in OCR_SHAPES if f"_{k}_" in model.name)
    images = [text_image(OCR_SHAPES[kind], s) for s in seeds]
    if kind == "cls":  # an orientation classifier: half the lines upside down
        images = [x[:, :, ::-1, ::-1].copy() if i % 2 else x for i, x in enumerate(images)]
    return [{inp.name: x} for x in images]


def errors(ref_path: Path, out_path: Path, samples) -> tuple[float, float]:
    a = ort.InferenceSession(str(ref_path), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(out_path), providers=["CPUExecutionProvider"])
    rel, agree = 0.0, []
    for feeds in samples:
        for x, y in zip(a.run(None, feeds), b.run(None, feeds)):
            x, y = x.astype(np.float64), y.astype(np.float64)
            rel = max(rel, float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30)))
            if x.ndim == 4 and x.shape[1] == 1:  # a probability map (det): no class axis
                continue
            if x.ndim >= 2 and x.shape[-1] > 1:
                agree.append(float(np.mean(x.argmax(-1) == y.argmax(-1))))
    return rel, float(np.mean(agree)) if agree else float("nan")


def timing_session(path: Path) -> ort.InferenceSession:
    """A CPU session for timing beside another one: its idle threads do not spin. Spinning
    threads of the session that ran last take one of the machine's two cores from the next
    one (ddddocr: 28-49 ms per run, alternating sessions, with spinning; 15.7 ms without)."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def latency_ratio(reference: Path, candidate: Path, feeds, repeats=30) -> float:
    """Median over repeats of (candidate time / reference time), the two sessions run
    alternately in one process so that load from other jobs hits both alike."""
    sessions = [timing_session(p) for p in (reference, candidate)]
    for sess in sessions:
        sess.run(None, feeds)
    ratios = []
    for _ in range(repeats):
        times = []
        for sess in sessions:
            t = time.perf_counter()
            sess.run(None, feeds)
            times.append(time.perf_counter() - t)
        ratios.append(times[1] / times[0])
    return statistics.median(ratios)


_LOAD_PEAK = """
import sys
import onnxruntime as ort


def status(key):  # kB; VmHWM is this process's own peak (ru_maxrss would include the parent's at exec)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))


before = status("VmRSS:")
ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
print(status("VmHWM:") - before)
"""


def load_ratio(reference: Path, candidate: Path) -> float:
    """Peak memory of creating an onnxruntime session for the candidate over the reference's
    (each in a fresh process, above what the import left resident): what loading the file costs
    on a device. onnxruntime folds the arith lowering at this point, so the candidate ends up
    holding float weights. nan when the reference's is under 1 MB (lost in the import's peak)."""
    peaks = [int(subprocess.run([sys.executable, "-c", _LOAD_PEAK, str(p)], capture_output=True, text=True,
                                check=True).stdout) for p in (reference, candidate)]
    return peaks[1] / peaks[0] if peaks[0] > 1024 else float("nan")


def compressed_sizes(path: Path) -> tuple[int, int | None]:
    data = path.read_bytes()
    try:
        import brotli

        br = len(brotli.compress(data, quality=9))
    except ImportError:
        br = None
    return len(gzip.compress(data, compresslevel=9)), br


DEFAULT = "onnxsurgery int8 (default)"
PER_TENSOR = ("onnxsurgery int8 tensor sym", "onnxsurgery int8 tensor asym")
SHRINK_RAY = "onnx_shrink_ray (default)"
CALIBRATED = "onnxsurgery --calibration"
VERIFIED = "onnxsurgery int8, verified"
CALIBRATION_SAMPLES, CALIBRATION_SEED = 16, 1000
TIMED = {DEFAULT, SHRINK_RAY}  # processing time compared: alternating runs, median ratio
WALL_REPEATS = 7


def tools(model: Path, out_dir: Path):
    stem = model.stem
    q = [str(BIN / "onnxsurgery"), "quant", str(model)]
    calib = calibration_file(model, out_dir)
    yield DEFAULT, out_dir / f"{stem}.int8.onnx", lambda o: q + [str(o), "--no-verify"]
    yield VERIFIED, out_dir / f"{stem}.int8v.onnx", lambda o: q + [str(o)]  # as typed
    yield "onnxsurgery --dtype int4", out_dir / f"{stem}.int4.onnx", \
        lambda o: q + [str(o), "--no-verify", "--dtype", "int4"]
    yield "onnxsurgery int8 channel sym", out_dir / f"{stem}.int8c.onnx", \
        lambda o: q + [str(o), "--no-verify", "--granularity", "channel", "--symmetric"]
    yield PER_TENSOR[0], out_dir / f"{stem}.int8t.onnx", \
        lambda o: q + [str(o), "--no-verify", "--granularity", "tensor", "--symmetric"]
    yield PER_TENSOR[1], out_dir / f"{stem}.int8ta.onnx", \
        lambda o: q + [str(o), "--no-verify", "--granularity", "tensor"]
    yield CALIBRATED, out_dir / f"{stem}.int8cal.onnx", \
        lambda o: q + [str(o), "--no-verify", "--calibration", str(calib)]
    yield "onnxsurgery int4 --calibration", out_dir / f"{stem}.int4cal.onnx", \
        lambda o: q + [str(o), "--no-verify", "--dtype", "int4", "--calibration", str(calib)]
    shrink_ray_dir = out_dir / "shrink_ray"
    yield SHRINK_RAY, shrink_ray_dir / f"{stem}_quantized_weights.onnx", \
        lambda o: [sys.executable, "-m", "onnx_shrink_ray.shrink", "-o", str(shrink_ray_dir), str(model)]
    yield "ort quantize_dynamic", out_dir / f"{stem}.dyn.onnx", lambda o: [
        sys.executable, "-c",
        "import sys; from onnxruntime.quantization import quantize_dynamic as q; "
        "q(sys.argv[1], sys.argv[2], extra_options={'EnableSubgraph': True})", str(model), str(o)]
    yield "onnxsurgery --dynamic", out_dir / f"{stem}.osdyn.onnx", lambda o: q + [str(o), "--no-verify", "--dynamic"]


def calibration_file(model: Path, out_dir: Path) -> Path:
    """CALIBRATION_SAMPLES inputs for --calibration, from seeds the evaluation does not use."""
    path = out_dir / f"{model.stem}.calibration.npz"
    if not path.exists():
        samples = samples_for(model, CALIBRATION_SAMPLES, first=CALIBRATION_SEED)
        np.savez(path, **{f"{k}__{i}": v for i, s in enumerate(samples) for k, v in s.items()})
    return path


def tiny_model(path: Path) -> Path:
    """A one-MatMul model (64x64 weight): what a tool's process costs before any real work."""
    import onnx
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnx 1.23 stamps 14, which onnxruntime 1.31 refuses
    onnx.save(model, str(path))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=Path, default=ROOT / "build/samples")
    ap.add_argument("--models", type=Path, default=ROOT / "build/models")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--only", help="only models whose file name contains this")
    args = ap.parse_args()
    qdir = args.samples / "quant"
    subprocess.run([sys.executable, str(ROOT / "samples/make_encoder.py"), "--out", str(qdir), "--only", "unique",
                    "--layers", str(args.layers), "--hidden", str(args.hidden)], check=True)
    models = [qdir / "encoder_unique.onnx"]
    # A transformer exported by torch, when torch and transformers are installed.
    made = subprocess.run([sys.executable, str(ROOT / "samples/make_transformer.py"), "--out", str(qdir)],
                          capture_output=True, text=True)
    if made.returncode == 0:
        models.append(qdir / "bert_classifier.onnx")
    else:
        print("  (no torch/transformers: skipping the exported BERT; pip install torch==2.13.0 transformers)")
    models += fetch_rapidocr(args.models)
    if args.only:
        models = [m for m in models if args.only in m.name]
    out_dir = ROOT / "build/bench_quant"
    out_dir.mkdir(parents=True, exist_ok=True)
    tiny = tiny_model(out_dir / "tiny.onnx")
    baseline = {name: run_measured(cmd(out))[1] for name, out, cmd in tools(tiny, out_dir)}
    rows = []
    for model in models:
        samples = samples_for(model)
        size = model.stat().st_size
        timed = {name: (out, cmd) for name, out, cmd in tools(model, out_dir) if name in TIMED}
        for out, _ in timed.values():
            out.parent.mkdir(parents=True, exist_ok=True)
        # The default and onnx_shrink_ray alternately, so that load from other jobs hits both alike.
        paired = {name: [] for name in timed}
        for _ in range(WALL_REPEATS):
            for name, (out, cmd) in timed.items():
                paired[name].append(run_measured(cmd(out)))
        for name, out, cmd in tools(model, out_dir):
            out.parent.mkdir(parents=True, exist_ok=True)
            runs = paired.get(name) or [run_measured(cmd(out))]
            wall, peak, code = statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]
            row = {"model": model.name, "tool": name}
            if name in TIMED and len(paired) == 2:
                row["wall_ratio"] = statistics.median(a[0] / b[0] for a, b in zip(paired[DEFAULT], paired[SHRINK_RAY]))
            if code != 0 or not out.exists():
                rows.append({**row, "status": "failed"})
                continue
            try:
                rel, agree = errors(model, out, samples)
                lat = latency_ratio(model, out, samples[0])
                load = load_ratio(model, out)
                status = "ok"
            except Exception as e:  # an output onnxruntime cannot load or run
                rel, agree, lat, load, status = (float("nan"),) * 4 + (f"fails: {str(e)[:50]}",)
            gz, br = compressed_sizes(out)
            gz0, br0 = compressed_sizes(model)
            rows.append({**row, "status": status, "wall_s": wall, "peak_x_input": peak / size,
                         "work_peak_x_input": (peak - baseline[name]) / size,
                         "size_pct": 100 * out.stat().st_size / size, "gzip_pct": 100 * gz / gz0,
                         "brotli_pct": 100 * br / br0 if br and br0 else None,
                         "rel_l2": rel, "argmax": agree, "latency_x": lat, "load_x": load})
        print(f"  {model.name} done", flush=True)

    print(f"\n{'model':36s} {'tool':28s} {'size%':>6s} {'gzip%':>6s} {'brotli%':>7s} {'relL2':>8s} "
          f"{'argmax':>7s} {'lat x':>6s} {'load x':>6s} {'wall s':>7s} {'peak/in':>7s} {'-base':>6s}  status")
    for r in rows:
        if r["status"] == "failed":
            print(f"{r['model']:36s} {r['tool']:28s} failed")
            continue
        br = f"{r['brotli_pct']:7.1f}" if r["brotli_pct"] is not None else "    n/a"
        print(f"{r['model']:36s} {r['tool']:28s} {r['size_pct']:6.1f} {r['gzip_pct']:6.1f} {br} "
              f"{r['rel_l2']:8.4f} {r['argmax']:7.3f} {r['latency_x']:6.2f} {r['load_x']:6.2f} {r['wall_s']:7.2f} "
              f"{r['peak_x_input']:7.2f} {r['work_peak_x_input']:6.2f}  {r['status']}")
    (out_dir / "results.json").write_text(json.dumps(rows, indent=1))
    print_targets(rows)


def print_targets(rows) -> None:
    """The default against the issue's targets, per model: error at most half of per-tensor
    int8's (the better of sym, asym and onnx_shrink_ray's), argmax >= 99%, latency <= 1.1x,
    processing no slower than onnx_shrink_ray (median of the ratios of alternating runs),
    peak <= 2.5x the input (as measured, and above the tool's own baseline on a tiny model)."""
    print("\ndefault int8 against the targets (error ratio: default relL2 / best per-tensor int8 relL2):")
    by_model: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], {})[r["tool"]] = r
    for model, tools_ in by_model.items():
        d = tools_.get(DEFAULT)
        if not d or d["status"] != "ok":
            print(f"  {model:36s} default failed")
            continue
        baselines = [tools_[t]["rel_l2"] for t in (*PER_TENSOR, SHRINK_RAY)
                     if t in tools_ and tools_[t]["status"] == "ok" and tools_[t]["rel_l2"] > 0]
        ratio = d["rel_l2"] / min(baselines) if baselines else float("nan")
        wall = f"{d['wall_ratio']:.2f}x" if "wall_ratio" in d else "n/a"
        i4 = tools_.get("onnxsurgery --dtype int4", {}).get("size_pct", float("nan"))
        print(f"  {model:36s} size {d['size_pct']:4.1f}% (int4 {i4:4.1f}%)  error ratio {ratio:.2f}  "
              f"argmax {d['argmax']:.4f}  latency {d['latency_x']:.2f}x  wall vs shrink_ray {wall}  "
              f"peak {d['peak_x_input']:.2f}x input ({d['work_peak_x_input']:.2f}x above baseline)  "
              f"load {d['load_x']:.2f}x the original's")
        v = tools_.get(VERIFIED)
        if v and v["status"] == "ok":
            print(f"  {'':36s} as typed (verification on): wall {v['wall_s']:.2f} s (--no-verify {d['wall_s']:.2f} s)  "
                  f"peak {v['peak_x_input']:.2f}x input ({v['work_peak_x_input']:.2f}x above baseline)")
        c = tools_.get(CALIBRATED)
        if c and c["status"] == "ok" and baselines:
            print(f"  {'':36s} with --calibration ({CALIBRATION_SAMPLES} other samples): size {c['size_pct']:4.1f}%  "
                  f"error ratio {c['rel_l2'] / min(baselines):.2f}  argmax {c['argmax']:.4f}  "
                  f"latency {c['latency_x']:.2f}x  wall {c['wall_s']:.2f} s")


if __name__ == "__main__":
    main()
