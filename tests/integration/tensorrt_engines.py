"""`make test-trt`: build a TensorRT engine from every `--target tensorrt` output, compare its
outputs with onnxruntime's on the same inputs, and time it against the float model's engine.

What it builds, each at int8 and int4 through `quant_file(target="tensorrt")`:
- the samples: the encoder from samples/make_encoder.py (2 layers, hidden 64: MatMul weights, an
  embedding table, LayerNorm), tests/builders.py's `tensorrt_prep_model` (Gather, LSTM, MatMul,
  Gemm with transB, Conv, at opset 12: the opset upgrade runs too) and a weight read by three
  MatMuls (ALBERT's shared layers in small: one DequantizeLinear per reader over one initializer);
  together they hold every form `--target tensorrt` writes: int8 DequantizeLinear per channel,
  `dq_equalized` (a Mul on the layer's input), int4 blocks of 128 and of 64, int8 where neither
  divides, float16 with a Cast, one DequantizeLinear per reader;
- with `--outputs DIR` (bench/tensorrt.py's build/tensorrt), every `*.trt*.onnx` and
  `*.modelopt_*.onnx` there (the bench models' outputs and NVIDIA Model Optimizer's), each
  against its float original found by stem under `--originals` (build/models). silero-vad's
  inputs are its 512-sample windows; a model whose inputs cannot be generated is listed as skipped.

The engine is built with Polygraphy's TensorRT loaders, strongly typed (explicit quantization:
the engine computes in the model's own types, no precision flags), one optimization profile at
the inputs' shapes, and run next to onnxruntime computing as TensorRT does (`runtime="tensorrt"`:
weights dequantized, float arithmetic). A result passes when the relative L2 distance of every
output is within RTOL and the static check finds nothing. Latency: median of TIMED runs after
WARMUP, against the float model's engine built the same way.

Not run yet: no session so far had TensorRT on a GPU (the lent machine cannot reach PyPI, and
TensorRT's wheels are over 1 GB). Where TensorRT or a CUDA device is missing, the script prints
one line saying which and exits 0: the static check (`onnxsurgery check`, run by `make test`) is
what runs everywhere.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.running.feeds import make_inputs
from onnxsurgery.running.sessions import session

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import builders  # noqa: E402

# The engine is FP32, but its tactics reassociate sums and a weight-only GEMM kernel may
# accumulate differently: a tenth of int8's typical output error (0.01-0.03) leaves room for
# that and still catches a misread scale or block axis (errors of order 1).
RTOL = 1e-2
WARMUP, TIMED = 10, 50
STATIC_ONLY = False  # --static: every output made and checked, no engine (runs anywhere)


def why_not_available() -> str | None:
    """None when an engine can be built here; else what is missing, in a few words."""
    try:
        import tensorrt as trt
    except ImportError:
        return "the tensorrt Python package is not installed (pip install tensorrt, on a machine with an NVIDIA GPU)"
    try:
        import polygraphy  # noqa: F401
    except ImportError:
        return "polygraphy is not installed (pip install polygraphy)"
    try:  # without a CUDA device, pybind11 raises TypeError ("factory function returned nullptr")
        builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
    except Exception as e:
        return f"TensorRT {trt.__version__} cannot create a builder here (no CUDA device?): {str(e).splitlines()[0]}"
    return None if builder is not None else f"TensorRT {trt.__version__} cannot create a builder here"


def shared_weight_model() -> onnx.ModelProto:
    """x [4, 128] -> three MatMuls reading one W [128, 128], a Relu between each."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("MatMul", ["ar", "W"], ["b"]), helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("MatMul", ["br", "W"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[4, 128])], [builders.vi("y", shape=[4, 128])],
                          [numpy_helper.from_array(builders.rand((128, 128), 1) * 0.1, "W")])


def samples(folder: Path) -> list[Path]:
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_encoder.py"), "--out", str(folder),
                    "--layers", "2", "--hidden", "64", "--only", "shared"], check=True, capture_output=True)
    made = [folder / "encoder_shared.onnx"]
    for name, model in (("tensorrt_prep", builders.tensorrt_prep_model()), ("shared_weight", shared_weight_model())):
        onnx.save(model, str(folder / f"{name}.onnx"))
        made.append(folder / f"{name}.onnx")
    return made


def feeds_for(model: Path) -> dict[str, np.ndarray]:
    """Inputs for `model`: silero-vad's window, state and rate; generated ones elsewhere."""
    names = {i.name for i in session(model).get_inputs()}
    if names == {"input", "state", "sr"}:  # silero-vad: 576 samples of noise-like speech at 16 kHz
        signal = np.sin(np.arange(576) * 0.07).astype(np.float32) * 0.3
        return {"input": signal[None], "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000)}
    return make_inputs(session(model), model=model)


def engine(path: Path, feeds: dict[str, np.ndarray]):
    from polygraphy.backend.trt import CreateConfig, EngineFromNetwork, NetworkFromOnnxPath, Profile

    profile = Profile()
    for name, value in feeds.items():
        if value.ndim:  # shape tensors (silero's sr) take no profile
            profile.add(name, min=value.shape, opt=value.shape, max=value.shape)
    network = NetworkFromOnnxPath(str(path), strongly_typed=True)
    return EngineFromNetwork(network, config=CreateConfig(profiles=[profile]))


def run_engine(path: Path, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
    """The engine's outputs and its median latency in milliseconds."""
    from polygraphy.backend.trt import TrtRunner

    with TrtRunner(engine(path, feeds)) as runner:
        outputs = {k: np.asarray(v).copy() for k, v in runner.infer(feeds).items()}
        for _ in range(WARMUP):
            runner.infer(feeds)
        times = []
        for _ in range(TIMED):
            start = time.perf_counter()
            runner.infer(feeds)
            times.append(time.perf_counter() - start)
    return outputs, 1e3 * statistics.median(times)


def compare(original: Path, result: Path, label: str, quant_error: float | None = None) -> bool:
    feeds = feeds_for(original)
    sess = session(result, runtime="tensorrt")
    expected = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    refused = onnxsurgery.check_file(result)["refused"]
    if STATIC_ONLY:
        print(f"{'ok  ' if not refused else 'FAIL'} {label}: {len(refused)} static-check findings, onnxruntime runs it "
              f"(no engine: --static)" + (f", quant's error {quant_error:.3g}" if quant_error is not None else ""))
        return not refused
    got, ms = run_engine(result, feeds)
    _, float_ms = run_engine(original, feeds)
    worst = max(float(np.linalg.norm(got[k].astype(np.float64) - v) / (np.linalg.norm(v) or 1.0))
                for k, v in expected.items())
    ok = worst <= RTOL and not refused
    extra = f", quant's error {quant_error:.3g}" if quant_error is not None else ""
    print(f"{'ok  ' if ok else 'FAIL'} {label}: engine vs onnxruntime relative L2 {worst:.2e}, {len(refused)} "
          f"static-check findings, {ms:.3f} ms against the float engine's {float_ms:.3f} ms{extra}", flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outputs", type=Path, help="also every *.trt*.onnx and *.modelopt_*.onnx in this folder")
    ap.add_argument("--originals", type=Path, default=ROOT / "build" / "models",
                    help="where the float originals of --outputs are, found by stem")
    ap.add_argument("--static", action="store_true", help="make and check every output, build no engine")
    args = ap.parse_args()
    global STATIC_ONLY
    STATIC_ONLY = args.static
    missing = None if args.static else why_not_available()
    if missing:
        print(f"test-trt: skipped: {missing}")
        return 0
    if not args.static:
        import tensorrt as trt

        print(f"TensorRT {trt.__version__}")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for source in samples(folder):
            feeds = feeds_for(source)
            for dtype in ("int8", "int4"):
                out = folder / f"{source.stem}.{dtype}.trt.onnx"
                report = onnxsurgery.quant_file(source, out, target="tensorrt", dtype=dtype, samples=[feeds],
                                                min_elements=1024)
                failures += not compare(source, out, f"{source.name} {dtype}", report.verification["rel_l2_error"])
    if args.outputs:
        for result in sorted(list(args.outputs.glob("*.trt*.onnx")) + list(args.outputs.glob("*.modelopt_*.onnx"))):
            stem = result.name.split(".")[0]
            original = next(iter(sorted(args.originals.rglob(f"{stem}.onnx"))), None)
            if original is None:
                print(f"skip {result.name}: no {stem}.onnx under {args.originals}")
                continue
            try:
                failures += not compare(original, result, result.name)
            except Exception as e:  # one model's failure to build is a finding, not the end of the run
                failures += 1
                print(f"FAIL {result.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
