"""Scale: shrink, quant, npy and info on a model over 4 GB (samples/make_large.py: external data,
duplicated weights), each in a fresh process: wall time, throughput over the input's size, and
peak RSS against that size. Every command runs with its defaults (shrink and quant verify in
onnxruntime, which then holds the model too)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "bench"))
from run import run_measured  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "large")
    args = ap.parse_args()
    model = args.out / "large.onnx"
    if not model.exists():
        subprocess.run([sys.executable, str(ROOT / "samples" / "make_large.py"), "--out", str(args.out)], check=True)
    size = model.stat().st_size + (args.out / "large.data").stat().st_size
    work = args.out / "out"
    work.mkdir(exist_ok=True)
    cli = str(BIN / "onnxsurgery")
    commands = [("info", [cli, "info", str(model)]),
                ("shrink", [cli, "shrink", str(model), str(work / "shrunk.onnx"), "--verify"]),
                ("quant", [cli, "quant", str(model), str(work / "quant.onnx")]),
                ("npy", [cli, "npy", str(model), str(work / "npy.onnx")])]
    print(f"{model.name}: {size / 1e9:.2f} GB (external data); each command in a fresh process")
    print(f"{'command':8s} {'wall s':>8s} {'MB/s':>8s} {'peak RSS MB':>12s} {'peak / size':>12s} {'output MB':>10s}")
    for name, cmd in commands:
        wall, peak, code = run_measured(cmd)
        outputs = sorted(work.glob(f"{ {'shrink': 'shrunk', 'quant': 'quant', 'npy': 'npy'}.get(name, '-') }*"))
        out_mb = sum(p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*"))
                     for p in outputs) / 1e6
        status = "" if code == 0 else f"  (exit {code})"
        print(f"{name:8s} {wall:8.1f} {size / 1e6 / wall:8.0f} {peak / 1e6:12.0f} {peak / size:12.2f} "
              f"{out_mb:10.1f}{status}", flush=True)


if __name__ == "__main__":
    main()
