"""onnxruntime-web (WASM) in headless Chromium, a real part of the suite (`make test-web`):
the sample encoder and its shrink, quant, quant --dtype int4 and --keep-quantized outputs each
load in the browser, compute what Python onnxruntime computes for the same file, and report
the wasm memory after session creation. Needs Node, `npm ci` in tests/web and /usr/bin/chromium
(make test-web and .ci/run install them); a browser that does not start fails the test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onnxsurgery
from onnxsurgery.running.sessions import session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "web"))
from browser import run_in_browser  # noqa: E402

pytestmark = pytest.mark.web

VARIANTS = {  # file -> how it is made from the sample
    "shrink.onnx": lambda src, out: onnxsurgery.shrink_file(src, out),
    "quant.onnx": lambda src, out: onnxsurgery.quant_file(src, out),
    "quant_int4.onnx": lambda src, out: onnxsurgery.quant_file(src, out, dtype="int4"),
    "keep_quantized.onnx": lambda src, out: onnxsurgery.quant_file(src, out, keep_quantized=True),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("web")
    subprocess.run([sys.executable, str(ROOT / "samples" / "make_encoder.py"), "--out", str(folder),
                    "--layers", "2", "--hidden", "256", "--only", "shared"], check=True, capture_output=True)
    src = folder / "encoder_shared.onnx"
    reports = {name: make(src, folder / name) for name, make in VARIANTS.items()}
    return folder, reports


def _python_outputs(path: Path, feeds) -> dict[str, np.ndarray]:
    """Python onnxruntime, set up as verification does for --runtime onnxruntime-web (fused
    DequantizeLinear -> MatMul computed with float activations, as the WASM build does)."""
    sess = session(path, runtime="onnxruntime-web")
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_every_variant_loads_and_computes_what_python_onnxruntime_computes(models):
    folder, reports = models
    names = ["encoder_shared.onnx", *VARIANTS]
    (inp,) = ort.InferenceSession(str(folder / names[0]), providers=["CPUExecutionProvider"]).get_inputs()
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]  # dynamic dimensions: 1
    feeds = {inp.name: np.random.default_rng(0).integers(0, 30000, shape).astype(np.int64)}
    results = dict(zip(names, run_in_browser(folder, [(n, feeds) for n in names])))
    for name, r in results.items():
        assert r["ok"], f"{name}: {r.get('error')}"
        assert r["isolated"], "the page must be cross-origin isolated (COOP/COEP headers)"
        assert not r["errors"], f"{name}: console errors {r['errors']}"
        for out, expected in _python_outputs(folder / name, feeds).items():
            got = r["outputs"][out]
            assert got.shape == expected.shape
            rel = np.linalg.norm(got - expected) / np.linalg.norm(expected)
            assert rel <= 1e-4, f"{name}: {out} differs from Python onnxruntime by {rel:.2e}"
    memory = {n: r["memory_after"] for n, r in results.items()}  # the wasm instance starts with the session
    print("wasm memory after session creation (MB):", {n: round(m / 2**20, 1) for n, m in memory.items()})
    # Memory: all positive, and weights kept quantized cost less than the float model.
    assert all(m > 0 for m in memory.values())
    assert memory["keep_quantized.onnx"] < memory["encoder_shared.onnx"]
    assert memory["quant_int4.onnx"] < memory["encoder_shared.onnx"]
