"""The default int8 against onnx-shrink-ray's per-channel int8 over paired draws of a zoo model's
weights (issue 55). The zoo's figure for a model is one draw of where int8 rounding lands, judged
on the worst of a few samples, so a gap of a few percent between two quantizers there can be that
draw's luck. Here the shipped float32 weights are moved N times within half bfloat16's spacing
(zoo/draws.py, as bench/perturb.py moves them: a model trained again, or saved from a bf16
checkpoint, is such a draw), each draw quantized by both (`quant --no-verify` of this checkout;
zoo/peers.py's shrink_ray) and both judged against that draw's own float model on the zoo's tune
and report sets (zoo.invariants.compare_runs: worst relative L2 over outputs and samples). Draw 0
is the shipped model. Per set: on how many draws ours errs no more than shrink-ray, and the
medians: a gap that holds on most draws is the forms', one that changes sides is rounding luck.

--change SPEC adds a third file, the default's own plan of each draw with SPEC applied
(bench/fresh_swaps.py's PATTERN=FORM[;...]: FORM a record's fields as JSON, FLOAT, or SR for
shrink-ray's form read from its file of the same draw): which weights carry a gap that holds.
--change may be given several times: one more file (and column) each, on the same draws.

    python bench/paired_draws.py crepe_tiny sk_mlp_digits --draws 12
    python bench/paired_draws.py oww_hey_jarvis --draws 6 --change '^model.4.weight=SR'
    python bench/paired_draws.py crepe_tiny --draws 6 --change 'conv=SR'
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decision_effects import ROOT, ZOO, feeds, inputs_dir  # noqa: E402
from fresh_swaps import changed  # noqa: E402
from shrink_ray_swaps import shrink_ray_axes  # noqa: E402
from zoo import decisions, models  # noqa: E402
from zoo.draws import MANTISSA_BITS, perturbed  # noqa: E402
from zoo.invariants import compare_runs  # noqa: E402
from zoo.run import run_feeds  # noqa: E402


def _ran(cmd: list, out: Path) -> bool:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True).returncode == 0 and out.exists()


def quantized(src: Path, out: Path, who: str) -> bool:
    """`src` quantized into `out` by the default (who="ours") or by onnx-shrink-ray."""
    if who == "ours":
        return _ran([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), "--no-verify"], out)
    return _ran([sys.executable, str(ROOT / "zoo" / "peers.py"), "shrink_ray", str(src), str(out)], out)


def changed_plan(src: Path, peer: Path, out: Path, spec: str) -> bool:
    """`src` quantized into `out` by the default's own plan with `spec` applied (module docstring)."""
    ran = subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), "--dry-run", "--json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    doc = json.loads(ran.stdout)
    doc["weights"] = changed(doc["weights"], spec, shrink_ray_axes(peer))
    plan = out.with_suffix(".plan.json")
    plan.write_text(json.dumps(doc))
    return _ran([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), "--no-verify",
                 "--plan", str(plan)], out)


def tally(rows: list[tuple[float, ...]]) -> str:
    """One set's line: rows of (ours, shrink-ray[, changed...]) errors, one per draw."""
    a = np.asarray(rows, np.float64)
    line = (f"ours errs no more than shrink-ray on {int((a[:, 0] <= a[:, 1]).sum())} of {len(a)} draws; medians "
            + " / ".join(f"{x:.6f}" for x in np.median(a, axis=0)))
    for c in range(2, a.shape[1]):
        label = "changed" if a.shape[1] == 3 else f"changed{c - 1}"  # numbered where --change was given twice or more
        line += (f"; {label} errs no more than shrink-ray on {int((a[:, c] <= a[:, 1]).sum())}, "
                 f"than ours on {int((a[:, c] <= a[:, 0]).sum())}")
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="zoo model names (zoo/models.py)")
    ap.add_argument("--draws", type=int, default=8, help="draws besides the shipped model")
    ap.add_argument("--seed", type=int, default=100, help="draw k uses seed + k")
    ap.add_argument("--like", default="bf16", choices=sorted(MANTISSA_BITS), help="whose rounding a draw imitates")
    ap.add_argument("--change", action="append", default=[],
                    help="PATTERN=FORM[;...]: one more file, the default's plan so changed (repeatable)")
    ap.add_argument("--zoo-inputs", help="as bench/decision_effects.py's")
    args = ap.parse_args(argv)
    for name in args.models:
        decide = getattr(decisions, models.BY_NAME[name].decision)
        src = ZOO / "models" / f"{name}.onnx"
        folder = inputs_dir(name, args.zoo_inputs)
        sets = {s: feeds(folder / f"{s}.npz") for s in ("tune", "report")}
        rows: dict[str, list] = {s: [] for s in sets}
        with tempfile.TemporaryDirectory(prefix=f"draws-{name}-") as tmp:
            for k in range(args.draws + 1):
                d = Path(tmp) / f"d{k}"
                d.mkdir()
                p = src if k == 0 else perturbed(src, d, np.random.default_rng(args.seed + k),
                                                   MANTISSA_BITS[args.like])
                outs = {who: d / f"{who}.onnx" for who in ("ours", "shrink_ray")}
                made = all(quantized(p, o, who) for who, o in outs.items())
                for c, spec in enumerate(args.change if made else [], 1):
                    outs[f"changed{c}"] = d / f"changed{c}.onnx"
                    made = made and changed_plan(p, outs["shrink_ray"], outs[f"changed{c}"], spec)
                if not made:
                    print(f"{name} draw {k}: a quantization failed", flush=True)
                    continue
                line = []
                for s, f in sets.items():
                    ref = run_feeds(p, f)
                    e = tuple(compare_runs(ref, run_feeds(o, f), decide, f)["error"] for o in outs.values())
                    rows[s].append(e)
                    line.append(f"{s} " + " / ".join(f"{x:.6f}" for x in e))
                print(f"{name} draw {k}{' (shipped)' if k == 0 else ''}, {' / '.join(outs)}: {'  '.join(line)}",
                      flush=True)
        for s, got in rows.items():
            if got:
                print(f"{name} {s}: {tally(got)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
