"""Invariant 4's time verdict under a shared machine's load. One run of `quant` and one of the
fastest peer, minutes apart, measure the load as much as the tools: in the fifteenth round 5 of the
7 models over the line ran beside CI, and quiet pairs put them under it. Where the first ratio is
over its line, ours and that peer run again in fresh processes, alternated (ours, peer, ours, peer:
`RETIMES` more pairs), and the median of the pairs' ratios (the first included) decides, a rerun
pair's ratio being the larger of its wall and its CPU ratio (pair_ratio: load pulls wall ratios
toward 1). A real slowdown is over the line in every pair and stays failed; a load spike moves one
pair. Both the first ratio and the median are kept in results.json (the row's `time`) and the
table."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from statistics import median
from typing import Callable

from zoo import invariants
from zoo.processes import ROOT, measured, ours

RETIMES = 2  # pairs run again where the first is over its line (each pair: ours, then the peer)


def dtype_of(kind: str) -> str:
    """The dtype whose peers set a time class's pace ("int8", "int4", "inputs": int8 with --inputs,
    "int4 inputs")."""
    return "int4" if kind.startswith("int4") else "int8"


def factor_of(kind: str) -> float:
    """A time class's line: TIME_FACTOR, and INPUTS_FACTOR more where it reads --inputs."""
    return invariants.TIME_FACTOR * (invariants.INPUTS_FACTOR if kind.endswith("inputs") else 1)


def pace(kind: str, peer_time: dict) -> tuple[str, float] | None:
    """The fastest peer of the command's dtype that handles the model, and its seconds."""
    ok = {k: v for k, v in peer_time[dtype_of(kind)].items() if v and v > 0}
    return min(ok.items(), key=lambda kv: kv[1]) if ok else None


def pair_ratio(pair) -> float | None:
    """One pair's ratio: ours over the peer's wall seconds, or over its CPU seconds (user + sys)
    where the pair has them and that is larger. Load stretches both tools' wall time by the same
    waits and so pulls a wall ratio toward 1 (ppocr_v4_seal_det's `quant --inputs` at load 25:
    6.7x of wall, 9.6x of CPU, 10.6x of both quiet); the CPU a command spends does not wait. None
    where the peer took no time."""
    ours, theirs, *cpu = pair
    if not theirs or theirs <= 0:
        return None
    ratio = ours / theirs
    if len(cpu) == 2 and cpu[1] and cpu[1] > 0:
        ratio = max(ratio, cpu[0] / cpu[1])
    return ratio


def verdict(pairs: list, factor: float, peer: str) -> tuple[list[str], dict]:
    """Invariant 4 on `pairs` of (ours, peer) wall seconds, each rerun with (ours, peer) CPU seconds
    after them, the run's own first: fails where the median of the pairs' ratios (pair_ratio) is over
    `factor`. Returns (failures, the record: first and median ratio, the pairs)."""
    rs = [r for r in map(pair_ratio, pairs) if r is not None]
    if not rs:
        return [], {}
    first, mid = rs[0], median(rs)
    record = {"peer": peer, "first": round(first, 2), "median": round(mid, 2), "pairs": [list(p) for p in pairs]}
    if mid <= factor:
        return [], record
    ours, theirs = pairs[0][:2]
    how = f"median of {len(rs)} alternated pairs {mid:.1f}x" if len(rs) > 1 else f"{first:.1f}x"
    return [f"{ours:.1f} s > {factor:g}x the fastest peer ({peer} {theirs:.1f} s; {how})"], record


def confirmed(first: tuple[float, float], factor: float, peer: str, run_ours: Callable[[], tuple[float, float]],
              run_peer: Callable[[], tuple[float, float]], retimes: int = RETIMES) -> tuple[list[str], dict]:
    """The verdict on the first pair (wall seconds) alone where it is within the line; otherwise
    after `retimes` more pairs, each (ours, then the peer) in fresh processes, each kept as (ours'
    wall, the peer's wall, ours' CPU, the peer's CPU). run_ours / run_peer: (wall, cpu) seconds of
    one fresh run, or None where it failed (the pair is not counted). The record keeps the load
    average beside them."""
    fails, record = verdict([first], factor, peer)
    if not fails:
        return fails, record
    pairs = [first]
    for _ in range(retimes):
        a, b = run_ours(), run_peer()
        if a is None or b is None:
            continue
        pairs.append((round(a[0], 2), round(b[0], 2), round(a[1], 2), round(b[1], 2)))
    fails, record = verdict(pairs, factor, peer)
    record["load"] = round(os.getloadavg()[0], 1)
    return fails, record


def cell(record: dict | None) -> str:
    """' [first -> median]' of a command that was timed again (the table's time cell), else ''."""
    if not record or len(record.get("pairs", [])) < 2:
        return ""
    return f" [{record['first']:.1f}x -> {record['median']:.1f}x of {record['peer']}]"


def judged(kind: str, wall: float, peer_time: dict, ours_argv: list, src: Path, scratch: Path,
           timeout: float) -> tuple[list[str], dict]:
    """zoo/run.py's time check of one shipped command: `ours_argv` (the command's argv after
    `python -m onnxsurgery`, writing under `scratch`) and the fastest peer run again where needed.
    What the reruns write is deleted."""
    fastest = pace(kind, peer_time)
    if fastest is None:
        return [], {}
    peer, theirs = fastest

    def run(argv: list, out: Path):
        r = measured(argv, timeout)
        for p in scratch.glob(out.name + "*"):
            p.unlink()
        return (r.wall, r.cpu) if r.rc == 0 else None

    peer_out = scratch / "retime.peer.onnx"
    return confirmed((round(wall, 2), theirs), factor_of(kind), peer,
                     lambda: run(ours(*ours_argv), scratch / "retime.onnx"),
                     lambda: run([sys.executable, str(ROOT / "zoo" / "peers.py"), peer, str(src), str(peer_out)],
                                 peer_out))
