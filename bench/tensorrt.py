"""TensorRT prep: `quant --target tensorrt` against NVIDIA's Model Optimizer (nvidia-modelopt's ONNX
quantizer), in one run, on the bench's real models with task inputs.

Per file: size, output error (worst relative L2 over the task inputs, computed as TensorRT runs
weight-only quantized layers: weights dequantized, arithmetic in float, i.e. onnxruntime CPU
with qdq_matmulnbits_accuracy_level 0), how many things onnx-tensorrt's operator list says
TensorRT 10.15's parser would refuse (onnxsurgery's static check), and the tool's wall time and
peak RSS. No TensorRT or GPU here: no engine is built.

Model Optimizer needs onnxruntime-gpu, cupy and torch, which would replace the CPU onnxruntime of
the project's environment, so it is installed into a venv of its own (build/modelopt-venv, a few
minutes the first time) and run there on the CPU execution provider. Its int4 mode with
`rtn_dq` is weight-only (DequantizeLinear on MatMul weights), like onnxsurgery's; its int8 mode
quantizes activations too (QuantizeLinear/DequantizeLinear pairs, calibrated on its own random
data here), so its error is not a like-for-like figure and is listed for what it is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime import fetch_models, task_inputs  # noqa: E402

from onnxsurgery.targets.tensorrt import check_tensorrt  # noqa: E402
from onnxsurgery.verify import session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MODELOPT_VENV = ROOT / "build" / "modelopt-venv"
MODELOPT_SPEC = "nvidia-modelopt[onnx]==0.47.0"
MODELS = ("minilm", "ddddocr_common", "ppocr_rec")


def error(ref: Path, cand: Path, samples) -> float:
    r, c = session(ref, runtime="tensorrt"), session(cand, runtime="tensorrt")  # as quant verifies
    worst = 0.0
    for feeds in samples:
        for a, b in zip(r.run(None, feeds), c.run(None, feeds)):
            worst = max(worst, float(np.linalg.norm(b - a) / np.linalg.norm(a)))
    return worst


def measured(cmd: list[str]) -> dict:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "measure.py"), *cmd], capture_output=True, text=True)
    return json.loads(r.stdout)


def modelopt_python() -> Path | None:
    python = MODELOPT_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing {MODELOPT_SPEC} into {MODELOPT_VENV} (a few minutes) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(MODELOPT_VENV)], check=True)
        r = subprocess.run([str(python), "-m", "pip", "install", "-q", MODELOPT_SPEC], capture_output=True, text=True)
        if r.returncode != 0:
            print("  install failed:", (r.stderr.strip().splitlines() or [""])[-1][:120])
            return None
    return python


def variants(src: Path, work: Path, python: Path | None):
    stem = src.stem
    for label, args in (("onnxsurgery quant --target tensorrt", []),
                        ("onnxsurgery quant --target tensorrt --dtype int4", ["--dtype", "int4"])):
        out = work / f"{stem}.trt{'_int4' if args else ''}.onnx"
        yield label, out, [str(BIN / "onnxsurgery"), "-q", "quant", str(src), str(out), "--target", "tensorrt",
                           "--no-verify", *args]
    if python is None:
        return
    for label, mode, method in (("modelopt int4 rtn_dq (weight-only)", "int4", "rtn_dq"),
                                ("modelopt int8 (activations too)", "int8", "max")):
        out = work / f"{stem}.modelopt_{mode}.onnx"
        yield label, out, [str(python), "-m", "modelopt.onnx.quantization", "--onnx_path", str(src),
                           "--quantize_mode", mode, "--calibration_method", method, "--calibration_eps", "cpu",
                           "--output_path", str(out)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "tensorrt")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    models = fetch_models(ROOT / "build" / "models")
    python = modelopt_python()
    import onnxruntime

    print(f"\nTensorRT prep, onnxruntime {onnxruntime.__version__} CPU computing as TensorRT runs weight-only "
          "layers (float arithmetic); findings: onnx-tensorrt's operator list for TensorRT 10.15")
    header = f"{'model':<15} {'tool':<50} {'MB':>6} {'relL2':>8} {'findings':>9} {'time s':>7} {'peak MB':>8}"
    print(header + "\n" + "-" * len(header))
    for name in args.models.split(","):
        src = models[name]
        samples = task_inputs(name, src, ROOT / "build" / "models")
        print(f"{name:<15} {'float original':<50} {src.stat().st_size / 1e6:>6.1f} {0.0:>8.4f} "
              f"{len(check_tensorrt(onnx.load(str(src)))):>9}")
        for label, out, cmd in variants(src, args.work, python):
            out.unlink(missing_ok=True)
            run = measured(cmd)
            if run["code"] != 0 or not out.exists():
                print(f"{name:<15} {label:<50} failed: {run['error'][:60]}")
                continue
            findings = check_tensorrt(onnx.load(str(out)))
            print(f"{name:<15} {label:<50} {out.stat().st_size / 1e6:>6.1f} {error(src, out, samples):>8.4f} "
                  f"{len(findings):>9} {run['wall']:>7.1f} {run['peak'] / 1e6:>8.0f}", flush=True)
            for finding in findings[:3]:
                print(f"{'':<17}{str(finding)[:110]}")


if __name__ == "__main__":
    main()
