"""TensorRT prep: `quant --target tensorrt` against NVIDIA's Model Optimizer (nvidia-modelopt's ONNX
quantizer), in one run, on the bench's real models with task inputs.

Per file: size, output error (worst relative L2 over the task inputs, computed as TensorRT runs
weight-only quantized layers: weights dequantized, arithmetic in float, i.e. onnxruntime CPU
with qdq_matmulnbits_accuracy_level 0), how many things onnx-tensorrt's operator list says
TensorRT 10.15's parser would refuse (onnxsurgery's static check), and the tool's wall time and
peak RSS; the default's int8 row is there to hold --target tensorrt's int8 to 1.5x its error.
No TensorRT or GPU here: no engine is built; `make test-trt` builds one from each output this
writes (tests/integration/tensorrt_engines.py --outputs build/tensorrt) where one can be.
--target tensorrt's choices were tuned on other inputs (three other spoken sentences, text lines
of seeds 100-107); these are the ones its figures are reported on (docs/benchmarks.md).

ALBERT-base (random weights; 12 layers share each weight: one DequantizeLinear per reader under
--target tensorrt) is judged on its encoder's sequence output, as bench/accuracy.py does.
silero-vad (the wheel's v5 model, LSTM weights in If branches) is judged as bench/accuracy.py does:
three sentences spoken by espeak-ng streamed in 512-sample windows with the state carried, worst
relative L2 of the stream of speech probabilities; quant verifies on a fourth (--inputs).

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
from onnxsurgery.running.sessions import session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELOPT_VENV = ROOT / "build" / "modelopt-venv"
MODELOPT_SPEC = "nvidia-modelopt[onnx]==0.47.0"
MODELS = ("minilm", "albert_base", "ddddocr_common", "ppocr_rec", "silero_vad")


def error(ref: Path, cand: Path, samples) -> float:
    r, c = session(ref, runtime="tensorrt"), session(cand, runtime="tensorrt")  # as quant verifies
    if ref.stem == "silero_vad":  # speech streams, the state carried window to window
        from accuracy import _vad_stream

        pairs = [(_vad_stream(r, s)[0], _vad_stream(c, s)[0]) for s in samples]
    else:
        pairs = [(a, b) for feeds in samples for a, b in zip(r.run(None, feeds), c.run(None, feeds))]
    return max(float(np.linalg.norm(b - a) / np.linalg.norm(a)) for a, b in pairs)


def silero(work: Path):
    """silero-vad from its wheel, three spoken sentences and quant's --inputs (a fourth), or None
    without the wheel or espeak-ng."""
    from accuracy import SPOKEN, spoken, vad_inputs
    from runtime import _wheel_files

    found = _wheel_files("silero-vad==6.2.3", ROOT / "build" / "models", (".onnx",))
    model = next(found.rglob("silero_vad.onnx"), None) if found else None
    streams = [spoken(text, seed, work) for seed, text in enumerate(SPOKEN)]
    if model is None or streams[0] is None:
        return None
    return model, streams[:3], ["--inputs", str(vad_inputs(work, streams[3]))]


def measured(cmd: list[str]) -> dict:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "measure.py"), *cmd], capture_output=True, text=True,
                       cwd=ROOT)  # python -m onnxsurgery: this checkout's package
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


def variants(src: Path, work: Path, python: Path | None, quant_args=()):
    stem = src.stem
    # the default's int8 first: --target tensorrt's int8 is held to 1.5x its error (issue 50)
    for label, args, name in (("onnxsurgery quant (default int8, for reference)", [], "default"),
                              ("onnxsurgery quant --target tensorrt", ["--target", "tensorrt"], "trt"),
                              ("onnxsurgery quant --target tensorrt --dtype int4",
                               ["--target", "tensorrt", "--dtype", "int4"], "trt_int4")):
        out = work / f"{stem}.{name}.onnx"
        yield label, out, [sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), "--no-verify",
                           *args, *quant_args]
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
    ap.add_argument("--no-modelopt", action="store_true", help="onnxsurgery's rows only (no Model Optimizer venv)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    models = fetch_models(ROOT / "build" / "models")
    python = None if args.no_modelopt else modelopt_python()
    import onnxruntime

    print(f"\nTensorRT prep, onnxruntime {onnxruntime.__version__} CPU computing as TensorRT runs weight-only "
          "layers (float arithmetic); findings: onnx-tensorrt's operator list for TensorRT 10.15")
    header = f"{'model':<15} {'tool':<50} {'MB':>6} {'relL2':>8} {'findings':>9} {'time s':>7} {'peak MB':>8}"
    print(header + "\n" + "-" * len(header))
    for name in args.models.split(","):
        quant_args = []
        if name == "silero_vad":
            found = silero(args.work)
            if found is None:
                print(f"{name:<15} skipped: the silero-vad wheel or espeak-ng is missing")
                continue
            src, samples, quant_args = found
        else:
            src = models[name]
            samples = task_inputs(name, src, ROOT / "build" / "models")
            if name == "albert_base":  # its encoder's sequence output, as bench/accuracy.py judges it
                from accuracy import albert_encoder

                src = albert_encoder(src, ROOT / "build" / "models")
        print(f"{name:<15} {'float original':<50} {src.stat().st_size / 1e6:>6.1f} {0.0:>8.4f} "
              f"{len(check_tensorrt(onnx.load(str(src)))):>9}")
        for label, out, cmd in variants(src, args.work, python, quant_args):
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
