"""Earlier runs of the zoo, as zoo/run.py reads them back: what each command did before
(invariant 6, nothing newly refused) and the time invariant re-judged when older runs are merged
into one table (`--merge`)."""

from __future__ import annotations

import json
from pathlib import Path

from zoo import invariants, timing
from zoo.commands import COMMANDS


def previous_runs(path: Path) -> dict[tuple[str, str, str], dict]:
    """(model, variant, command) -> {"rc", "date"} from the results file `path` of an earlier run
    (empty where there is none or it does not parse)."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {(m["name"], variant, cmd): {"rc": row.get("rc"), "date": m.get("date", stored.get("date"))}
            for m in stored.get("models", []) for variant, v in m.get("variants", {}).items()
            for cmd, row in v.get("commands", {}).items()}


def within_time_class(wall: float, kind: str, peer_time: dict) -> list[str]:
    """The time invariant of one run of a command of time class `kind` against the fastest peer."""
    return invariants.within_time(wall, peer_time[timing.dtype_of(kind)], timing.factor_of(kind))


def retime(r: dict) -> None:
    """Re-judge a stored model's time invariant under the current peer rule (merge of older runs)."""
    peers, size = r.get("peers", {}), r.get("size", 0)
    for row in peers.values():
        if row.get("handles") and size and row.get("size", 0) >= 0.9 * size:
            row["handles"] = False
    paces = {kind: {k: v["wall"] for k, v in peers.items() if v["kind"] == kind and v.get("handles")}
             for kind in ("int8", "int4")}
    cmds = r.get("variants", {}).get("shipped", {}).get("commands", {})
    for cmd, row in cmds.items():
        kind = COMMANDS.get(cmd, (None, None, None))[2]
        if not kind or row.get("rc") != 0:
            continue
        old = [f for f in row.get("failures", []) if "fastest peer" in f]
        timed = row.get("time") or {}
        if len(timed.get("pairs", [])) > 1 and timed.get("peer") in paces[timing.dtype_of(kind)]:
            new = timing.verdict([tuple(p) for p in timed["pairs"]], timing.factor_of(kind), timed["peer"])[0]
        else:  # one run: the first pair's verdict (a run before the rerun rule, or within the line)
            new = within_time_class(row["wall"], kind, paces)
        row["failures"] = [f for f in row.get("failures", []) if f not in old] + new
        r["failures"] = [f for f in r["failures"] if not any(f == f"{r['name']} [shipped] {cmd}: {o}" for o in old)]
        r["failures"] += [f"{r['name']} [shipped] {cmd}: {f}" for f in new]
