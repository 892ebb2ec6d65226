"""Benchmark `onnxsurgery shrink` against scs4onnx (the tool people use today), side by side.

For every model: median wall time and peak memory (of the whole tool process, as the
kernel's max RSS for that child), output size, and whether the output computes exactly what
the input does in onnxruntime. Models: the repository's samples and the PP-OCR models shipped
in the rapidocr-onnxruntime wheel (fetched from PyPI into build/models).

Run with `make bench`. Figures are from one run on this machine; quote ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run_measured(cmd: list[str]) -> tuple[float, int, int]:
    """Run `cmd` through bench/measure.py; return (wall seconds, peak RSS bytes, exit code)."""
    import json

    out = subprocess.run([sys.executable, str(ROOT / "bench/measure.py"), *cmd],
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    if r["code"] != 0:
        print(f"    {Path(cmd[0]).name} failed: {r['error']}")
    return r["wall"], r["peak"], r["code"]


def fetch_rapidocr(dest: Path) -> list[Path]:
    """PP-OCR det/rec/cls models from the rapidocr-onnxruntime wheel (weights are Constant
    nodes in some of them)."""
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob("*.onnx"))
    if found:
        return found
    wheel_dir = dest / "wheel"
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "rapidocr-onnxruntime==1.4.4", "-d", str(wheel_dir)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  (rapidocr wheel not available: {r.stderr.strip().splitlines()[-1:]})")
        return []
    for wheel in wheel_dir.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(".onnx"):
                    (dest / Path(name).name).write_bytes(z.read(name))
    shutil.rmtree(wheel_dir)
    return sorted(dest.glob("*.onnx"))


def outputs_exact(original: Path, result: Path) -> str:
    from onnxsurgery.running.verify import compare_models

    try:
        r = compare_models(original, result)
    except Exception as e:  # report, don't stop the benchmark
        return f"fails: {str(e)[:60]}"
    return "exact" if r["exact"] else f"differs ({r['max_abs_error']:.2g})"


def bench_model(model: Path, out_dir: Path, repeats: int) -> list[dict]:
    tools = {
        "onnxsurgery": lambda o: [str(BIN / "onnxsurgery"), "shrink", str(model), str(o)],
        "scs4onnx": lambda o: [str(BIN / "scs4onnx"), str(model), str(o), "-n"],
    }
    rows = []
    in_size = model.stat().st_size
    for tool, cmd in tools.items():
        out = out_dir / f"{model.stem}.{tool}.onnx"
        walls, peaks, ok = [], [], True
        for _ in range(repeats):
            wall, peak, code = run_measured(cmd(out))
            if code != 0:
                ok = False
                break
            walls.append(wall)
            peaks.append(peak)
        if not ok:
            rows.append({"model": model.name, "tool": tool, "status": "failed"})
            continue
        rows.append({
            "model": model.name, "tool": tool, "input_mb": in_size / 1e6,
            "wall_s": statistics.median(walls), "peak_mb": max(peaks) / 1e6,
            "peak_x_input": max(peaks) / in_size, "output_mb": out.stat().st_size / 1e6,
            "status": outputs_exact(model, out),
        })
    return rows


def unique_tensor_bytes(model: Path) -> int:
    """Bytes of the distinct tensors (dtype, shape, bytes) in a model: the floor for shrink."""
    import onnx

    from onnxsurgery.storage.protos import all_tensor_protos

    seen = set()
    total = 0
    m = onnx.load(str(model))
    for t in all_tensor_protos(m.graph):
        arr = onnx.numpy_helper.to_array(t)
        key = (t.data_type, tuple(t.dims), arr.tobytes())
        if key not in seen:
            seen.add(key)
            total += arr.nbytes
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=Path, default=ROOT / "build/samples")
    ap.add_argument("--models", type=Path, default=ROOT / "build/models")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    subprocess.run([sys.executable, str(ROOT / "samples/make_encoder.py"), "--out", str(args.samples),
                    "--layers", str(args.layers), "--hidden", str(args.hidden)], check=True)
    models = [args.samples / "encoder_shared.onnx", args.samples / "encoder_unique.onnx"]
    models += fetch_rapidocr(args.models)
    out_dir = ROOT / "build/bench"
    out_dir.mkdir(parents=True, exist_ok=True)

    rows = []
    for model in models:
        print(f"  {model.name} ...", flush=True)
        rows.extend(bench_model(model, out_dir, args.repeats))

    print()
    print("shrink: median of %d runs, peak RSS of the tool process" % args.repeats)
    header = f"{'model':34s} {'tool':12s} {'in MB':>8s} {'wall s':>8s} {'peak MB':>8s} " \
             f"{'peak/in':>8s} {'out MB':>8s}  result"
    print(header)
    print("-" * len(header))
    for r in rows:
        if r["status"] == "failed":
            print(f"{r['model']:34s} {r['tool']:12s} failed")
            continue
        print(f"{r['model']:34s} {r['tool']:12s} {r['input_mb']:8.1f} {r['wall_s']:8.2f} "
              f"{r['peak_mb']:8.0f} {r['peak_x_input']:8.2f} {r['output_mb']:8.1f}  {r['status']}")

    print()
    print("ratios (onnxsurgery / scs4onnx):")
    by = {(r["model"], r["tool"]): r for r in rows if r["status"] != "failed"}
    for model in models:
        a, b = by.get((model.name, "onnxsurgery")), by.get((model.name, "scs4onnx"))
        if a and b:
            print(f"  {model.name:34s} wall {a['wall_s'] / b['wall_s']:.2f}x   "
                  f"peak {a['peak_mb'] / b['peak_mb']:.2f}x   output {a['output_mb'] / b['output_mb']:.3f}x")
    shared = args.samples / "encoder_shared.onnx"
    a = by.get((shared.name, "onnxsurgery"))
    if a:
        floor = unique_tensor_bytes(shared) / 1e6
        print(f"\n  {shared.name}: output {a['output_mb']:.2f} MB vs unique tensors {floor:.2f} MB "
              f"({(a['output_mb'] / floor - 1) * 100:+.2f}%)")


if __name__ == "__main__":
    main()
