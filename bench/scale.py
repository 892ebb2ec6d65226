"""Scale: onnxsurgery's commands at the size of real models, each in a fresh process: wall time
and peak RSS against the input's bytes on disk (issues 33 and 36). Sections (--only):

- large: shrink, quant (verified, and --no-verify), npy and info on a transformer-like model
  with external data (samples/make_large.py; default 2.67 GB, 53 layers, every weight distinct
  as in an LLM: --distinct 4 gives the 4.2 GB duplicated sample with --layers 84).
- encoder: `quant` (default int8, verified and --no-verify) beside onnx-shrink-ray int8 on the
  359 MB ALBERT-like sample (make demo), runs interleaved, medians.
- decoder: quant's variants (int8, int4, --target onnxruntime, --keep-quantized), as typed
  (verified), on the 540 MB SmolLM2 exports (build/decoder: onnxruntime-genai's with a data
  file, optimum's inline, opset 18 -> 21 for int4); then `report` and `info` on the genai one.

Every command runs as `python -m onnxsurgery` from this checkout. The machine may be shared:
quote the ratios and medians of --repeats runs, not single figures; CPU s (user + system, the
command's child processes included) moves less than wall time when other jobs hold the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "onnxsurgery", "-q"]
BEFORE: Path | None = None  # --before


def measured(cmd: list[str], code: Path | None = None) -> tuple[float, float, int, int, str]:
    """(wall s, CPU s, peak RSS bytes, exit code, last stderr line) of `cmd`, run from this checkout, or
    with the package of the checkout `code` first on the path (from outside any checkout: `-m`
    puts the working directory first)."""
    env = dict(os.environ, PYTHONPATH=str(code)) if code is not None else None
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "measure.py"), *map(str, cmd)], capture_output=True,
                       text=True, cwd=ROOT if code is None else Path("/"), env=env, check=True)
    out = json.loads(r.stdout)
    return out["wall"], out["cpu"], out["peak"], out["code"], out["error"]


def files_bytes(path: Path) -> int:
    """A model's bytes on disk: the .onnx and the data files beside it named after it."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


Row = tuple[str, list, "Path | None", "Path | None"]  # label, command, output, checkout (None: this one)


def ours(label: str, args, out: Path | None = None) -> list[Row]:
    """The rows of one onnxsurgery command: `args(output)` are its arguments. With --before DIR,
    a "before: " row too, with that checkout's code and an output of its own."""
    rows = [(label, [*CLI, *args(out)], out, None)]
    if BEFORE is not None:
        theirs = out.with_name("before." + out.name) if out is not None else None
        rows.append((f"before: {label}", [*CLI, *args(theirs)], theirs, BEFORE))
    return rows


def run_rows(rows: list[Row], size: int, repeats: int) -> None:
    """Run each row's command `repeats` times, the rows interleaved (A, B, A, B...); print
    medians of wall time, the largest peak RSS, and the output's bytes."""
    walls: dict[str, list[float]] = {row[0]: [] for row in rows}
    cpus: dict[str, list[float]] = {row[0]: [] for row in rows}
    peaks: dict[str, list[int]] = {row[0]: [] for row in rows}
    failed: dict[str, str] = {}
    outputs: dict[str, int] = {}
    for _ in range(repeats):
        for label, cmd, out, code in rows:
            if label in failed:
                continue
            if out is not None:
                for p in out.parent.glob(out.name + "*"):
                    p.unlink() if p.is_file() else shutil.rmtree(p)
            wall, cpu, peak, rc, err = measured(cmd, code)
            if rc != 0:
                failed[label] = f"exit {rc}: {err[:80]}"
                continue
            walls[label].append(wall)
            cpus[label].append(cpu)
            peaks[label].append(peak)
            if out is not None:
                outputs[label] = sum(p.stat().st_size if p.is_file() else 0 for p in out.parent.glob(out.name + "*"))
    print(f"  {'command':52s} {'wall s':>7s} {'CPU s':>7s} {'runs':>5s} {'peak RSS MB':>12s} {'peak/size':>10s} "
          f"{'output MB':>10s}")
    for label, *_ in rows:
        if label in failed:
            print(f"  {label:52s} failed: {failed[label]}")
            continue
        out_mb = f"{outputs[label] / 1e6:10.1f}" if label in outputs else f"{'-':>10s}"
        print(f"  {label:52s} {statistics.median(walls[label]):7.1f} {statistics.median(cpus[label]):7.1f} "
              f"{len(walls[label]):5d} "
              f"{max(peaks[label]) / 1e6:12.0f} {max(peaks[label]) / size:10.2f} {out_mb}", flush=True)


def large(args, work: Path) -> None:
    folder = args.large_dir
    model = folder / "large.onnx"
    if not model.exists():
        subprocess.run([sys.executable, str(ROOT / "samples" / "make_large.py"), "--out", str(folder),
                        "--hidden", str(args.hidden), "--layers", str(args.layers), "--distinct", str(args.distinct)],
                       check=True)
    size = model.stat().st_size + (folder / "large.data").stat().st_size
    print(f"\n## large: {model} {size / 1e9:.2f} GB ({size / 2**30:.2f} GiB, external data)")
    run_rows([*ours("info", lambda o: ["info", model]),
              *ours("shrink --verify", lambda o: ["shrink", model, o, "--verify"], work / "shrunk.onnx"),
              *ours("quant --no-verify", lambda o: ["quant", model, o, "--no-verify"], work / "quant_nv.onnx"),
              *ours("quant (verified)", lambda o: ["quant", model, o], work / "quant.onnx"),
              *ours("npy", lambda o: ["npy", model, o], work / "npy.onnx")], size, args.repeats)


def encoder(args, work: Path) -> None:
    model = args.encoder
    if not model.exists():
        print(f"\n## encoder: {model} missing (make demo)")
        return
    size = model.stat().st_size
    print(f"\n## encoder: {model.name} {size / 1e6:.1f} MB, beside onnx-shrink-ray int8 per channel")
    shrink_ray = work / "shrink_ray"
    run_rows([*ours("quant (verified)", lambda o: ["quant", model, o], work / "enc.onnx"),
              *ours("quant --no-verify", lambda o: ["quant", model, o, "--no-verify"], work / "enc_nv.onnx"),
              ("onnx-shrink-ray int8 --per-channel",
               [sys.executable, "-m", "onnx_shrink_ray.shrink", "-o", shrink_ray, "--per-channel", model], None, None)],
             size, args.repeats)


VARIANTS = [("int8", []), ("int4", ["--dtype", "int4"]), ("--target onnxruntime", ["--target", "onnxruntime"]),
            ("--target onnxruntime --dtype int4", ["--target", "onnxruntime", "--dtype", "int4"]),
            ("--keep-quantized", ["--keep-quantized"])]


def decoder(args, work: Path) -> None:
    for family in ("genai_fp32", "optimum"):
        model = args.decoders / family / "model.onnx"
        if not model.exists():
            print(f"\n## decoder: {model} missing (bench/decoder.py makes it)")
            continue
        size = files_bytes(model)
        print(f"\n## decoder: {family}/model.onnx {size / 1e6:.1f} MB, quant as typed (verified)")
        run_rows([row for k, (label, flags) in enumerate(VARIANTS)
                  for row in ours(f"quant {label}", lambda o, flags=flags, model=model: ["quant", model, o, *flags],
                                  work / f"{family}.{k}.onnx")], size, args.repeats)
    model = args.decoders / "genai_fp32" / "model.onnx"
    if model.exists():
        print(f"\n## report and info: genai_fp32/model.onnx {files_bytes(model) / 1e6:.1f} MB")
        run_rows([*ours("info", lambda o: ["info", model]),
                  *ours("report", lambda o: ["report", model, "-o", o], work / "genai_fp32.report.html")],
                 files_bytes(model), args.report_repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sections = ["large", "encoder", "decoder"]
    ap.add_argument("--only", nargs="*", choices=sections, default=sections)
    ap.add_argument("--large-dir", type=Path, default=ROOT / "build" / "large_distinct",
                    help="where the large model is (made there if missing, with --hidden/--layers/--distinct)")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=53)
    ap.add_argument("--distinct", type=int, default=53)
    ap.add_argument("--encoder", type=Path, default=ROOT / "build" / "samples" / "encoder_shared.onnx")
    ap.add_argument("--decoders", type=Path, default=ROOT / "build" / "decoder")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "scale")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--report-repeats", type=int, default=1)
    ap.add_argument("--before", type=Path, help="a checkout of earlier code (git worktree add DIR <commit>): "
                    "each onnxsurgery command runs with it too, interleaved")
    args = ap.parse_args()
    global BEFORE
    BEFORE = args.before.resolve() if args.before else None
    for name in ("large_dir", "encoder", "decoders", "work"):  # the --before runs start from /
        setattr(args, name, getattr(args, name).resolve())
    args.work.mkdir(parents=True, exist_ok=True)
    print("Each command in a fresh process; wall: median of the runs, interleaved; peak RSS: the largest; "
          "peak/size: against the input's bytes on disk")
    for section in args.only:
        {"large": large, "encoder": encoder, "decoder": decoder}[section](args, args.work)


if __name__ == "__main__":
    main()
