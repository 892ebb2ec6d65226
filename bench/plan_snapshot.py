"""Every `quant --dry-run --json` plan of the bench models under a fixed list of option sets,
written to a folder, or compared with an earlier folder: the check that a restructuring of the
planner changed no decision (issue 51: "plans byte-identical before and after").

    python bench/plan_snapshot.py --out build/plans-before --code ../base   # a checkout of the commit before
    python bench/plan_snapshot.py --out build/plans-after --compare build/plans-before

Models: the samples built in code (encoder with shared layers, a tiny Llama decoder with a KV
cache) and the real ones bench/runtime.py fetches into build/models (MiniLM, ALBERT, ddddocr,
PP-OCRv4 rec, silero-vad's float32, If-less and float16 models), each skipped with a line
where missing. Exit 1 when a plan differs.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

OPTION_SETS = {
    "default": [],
    "int4": ["--dtype", "int4"],
    "int4-ort": ["--target", "onnxruntime", "--dtype", "int4"],
    "int8-ort": ["--target", "onnxruntime"],
    "web": ["--target", "onnxruntime-web"],
    "tensorrt": ["--target", "tensorrt"],
    "tensorrt-int4": ["--target", "tensorrt", "--dtype", "int4"],
    "keep-quantized": ["--keep-quantized"],
    "symmetric-block": ["--symmetric", "--granularity", "block", "--block-size", "32"],
    "asymmetric": ["--asymmetric"],
    "uint8-tensor": ["--dtype", "uint8", "--granularity", "tensor"],
    "lean": ["--lowering", "scaled"],
    "arith": ["--lowering", "arith"],
    "dq": ["--lowering", "dq"],
    "fp16": ["--fp16"],
    "levels": ["--levels", "16"],
    "min-elements": ["--min-elements", "100000"],
    "exclude": ["--exclude", "*.bias", "--exclude", "*embed*"],
    "memory-small": ["--memory", "0.001"],
    "no-merge": ["--no-merge"],
    "inputs": ["--inputs", "{inputs}"],
    "inputs-int4": ["--inputs", "{inputs}", "--dtype", "int4"],
    "calibration": ["--calibration", "{inputs}"],
    "target-size": ["--target-size", "{half_size}"],
    "target-error": ["--target-error", "0.02"],
}
# the measured option sets run a model many times: only on the small models
MEASURED = {"inputs", "inputs-int4", "calibration", "target-size", "target-error"}
SMALL_BYTES = 40_000_000


def models(build: Path) -> dict[str, Path]:
    found = {}
    samples = build / "plan-samples"
    if not (samples / "encoder_shared.onnx").exists():
        subprocess.run([sys.executable, str(ROOT / "samples/make_encoder.py"), "--out", str(samples), "--layers", "2",
                        "--hidden", "128", "--only", "shared"], check=True, capture_output=True)
    found["encoder_shared"] = samples / "encoder_shared.onnx"
    decoder = build / "plan-samples" / "decoder"
    if not (decoder / "model.onnx").exists():
        subprocess.run([sys.executable, str(ROOT / "samples/make_decoder.py"), "--out", str(decoder), "--quiet"],
                       check=True, capture_output=True)
    found["decoder_tiny"] = next(decoder.glob("*.onnx"))
    real = build / "models"
    for name, rel in (("minilm", "minilm.onnx"), ("albert", "albert_base.onnx"), ("ddddocr", "ddddocr_common.onnx"),
                      ("ppocr_rec", "rapidocr/ch_PP-OCRv4_rec_infer.onnx")):
        if (real / rel).exists():
            found[name] = real / rel
        else:
            print(f"  ({name} skipped: {real / rel} missing; bench/runtime.py fetches it)")
    for name, file in (("silero", "silero_vad.onnx"), ("silero_ifless", "silero_vad_op18_ifless.onnx"),
                       ("silero_half", "silero_vad_half.onnx")):  # If branches; none; float16 weights
        path = next(real.rglob(file), None) if real.exists() else None
        if path is not None:
            found[name] = path
    return found


def inputs_for(name: str, model: Path, dest: Path) -> Path:
    """Two samples of generated inputs (onnxsurgery's own), saved as .npz, for the measured sets."""
    import onnxruntime as ort

    from onnxsurgery.running.generated import runnable_inputs

    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{name}.inputs.npz"
    if not path.exists():
        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        feeds = [runnable_inputs(sess, lambda f: sess.run(None, f), seed=seed, model=str(model))[0] for seed in (1, 2)]
        np.savez(path, **{f"{k}__{i}": v for i, f in enumerate(feeds) for k, v in f.items()})
    return path


def plan(model: Path, args: list[str], code: Path = ROOT) -> bytes:
    """The plan as `code`'s onnxsurgery prints it (python -m, run in that folder, imports its own)."""
    r = subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(model), "--dry-run", "--json", *args],
                       capture_output=True, cwd=code)
    # a refusal is part of the behaviour too: its one line, and the exit status
    return r.stdout if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.decode().strip()}".encode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path, help="an earlier --out folder")
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--only", nargs="*", help="option sets (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--code", type=Path, default=ROOT,
                    help="the onnxsurgery checkout that plans (default: this one; another worktree for a baseline)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for name, model in models(a.build).items():
        small = model.stat().st_size < SMALL_BYTES
        for label, options in OPTION_SETS.items():
            if a.only and label not in a.only or label in MEASURED and not small:
                continue
            if any("{inputs}" in o for o in options):
                inputs = inputs_for(name, model, a.build.resolve() / "plan-samples" / "inputs")
                options = [str(inputs) if o == "{inputs}" else o for o in options]
            options = [f"{model.stat().st_size / 2e6:.3f}" if o == "{half_size}" else o for o in options]
            jobs.append((f"{name}.{label}.json", model.resolve(), options))
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda job: (job[0], plan(job[1], job[2], a.code)), jobs))
    differ = 0
    for file, text in results:
        (a.out / file).write_bytes(text)
        if a.compare is not None:
            before = a.compare / file
            same = before.exists() and before.read_bytes() == text
            differ += not same
            if not same:
                print(f"DIFF {file}" + ("" if before.exists() else " (not in the earlier folder)"))
    digest = hashlib.sha256(b"".join(t for _, t in sorted(results))).hexdigest()[:12]
    print(f"{len(results)} plans written to {a.out} (sha256 {digest})"
          + (f"; {differ} differ from {a.compare}" if a.compare is not None else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
