"""`make test-trt`: build a TensorRT engine from each `--target tensorrt` sample output and
compare its outputs with onnxruntime's on the same inputs.

The samples are the encoder from samples/make_encoder.py (2 layers, hidden 64: MatMul weights,
an embedding table, LayerNorm) and tests/builders.py's `tensorrt_prep_model` (Gather, LSTM,
MatMul, Gemm with transB, Conv, at opset 12, so that the opset upgrade runs too). Each goes
through `quant_file(target="tensorrt")` at int8 and at int4. The engine is built with
Polygraphy's TensorRT loaders (strongly typed, so FP32; one optimization profile fixed at the inputs'
shapes) and run next to onnxruntime computing as TensorRT does (`runtime="tensorrt"`: weights
dequantized, float arithmetic). A result passes when the relative L2 distance of every output
is within RTOL (1e-2). Not run here: the figures it prints have not been seen yet.

Where TensorRT or a CUDA device is missing, the script prints one line saying which and exits
0: the static check (`onnxsurgery check`, run by `make test`) is what runs everywhere. Not run
on this project's CI machines, which have no GPU.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

import onnxsurgery
from onnxsurgery.verify import make_inputs, session

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import builders  # noqa: E402

# The engine is FP32, but its tactics reassociate sums and a weight-only GEMM kernel may
# accumulate differently: a tenth of int8's typical output error (0.01-0.03) leaves room for
# that and still catches a misread scale or block axis (errors of order 1).
RTOL = 1e-2


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


def samples(folder: Path) -> list[Path]:
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_encoder.py"), "--out", str(folder),
                    "--layers", "2", "--hidden", "64", "--only", "shared"], check=True, capture_output=True)
    prep = folder / "tensorrt_prep.onnx"
    onnx.save(builders.tensorrt_prep_model(), str(prep))
    return [folder / "encoder_shared.onnx", prep]


def engine_outputs(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from polygraphy.backend.trt import CreateConfig, EngineFromNetwork, NetworkFromOnnxPath, Profile, TrtRunner

    profile = Profile()
    for name, value in feeds.items():
        profile.add(name, min=value.shape, opt=value.shape, max=value.shape)
    # strongly typed, as TensorRT asks for explicit quantization: the engine computes in the
    # model's own types (FP32 here), no precision flags
    network = NetworkFromOnnxPath(str(path), strongly_typed=True)
    build = EngineFromNetwork(network, config=CreateConfig(profiles=[profile]))
    with TrtRunner(build) as runner:
        return {k: np.asarray(v) for k, v in runner.infer(feeds).items()}


def main() -> int:
    missing = why_not_available()
    if missing:
        print(f"test-trt: skipped: {missing}")
        return 0
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for source in samples(folder):
            feeds = make_inputs(session(source), model=source)
            for dtype in ("int8", "int4"):
                out = folder / f"{source.stem}.{dtype}.trt.onnx"
                report = onnxsurgery.quant_file(source, out, target="tensorrt", dtype=dtype, samples=[feeds])
                refused = report.target_check["refused"]
                sess = session(out, runtime="tensorrt")
                expected = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
                got = engine_outputs(out, feeds)
                worst = max(float(np.linalg.norm(got[k].astype(np.float64) - v) / (np.linalg.norm(v) or 1.0))
                            for k, v in expected.items())
                ok = worst <= RTOL and not refused
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {source.name} {dtype}: engine vs onnxruntime relative L2 "
                      f"{worst:.2e}, {len(refused)} static-check findings, quant's error "
                      f"{report.verification['rel_l2_error']:.3g}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
