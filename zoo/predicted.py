"""Invariant 13: `info` tells what each method would save before anyone runs it, and people choose a
method on that figure. On the model as shipped, the file that `shrink`, `quant` and `quant --dtype
int4` then write is within SLACK of the size `info --json` predicted for it (its `model_bytes` less
the method's `savings`), or FLOOR bytes. No command more: the zoo's own `info` runs with --json."""

from __future__ import annotations

import json

SLACK = 0.15
FLOOR = 16 * 1024
# the zoo's command -> the method `info --json` names in its savings
PREDICTED = {"shrink --verify": "shrink", "quant": "quant int8", "quant --dtype int4": "quant int4"}


def within_prediction(info_json: str, rows: dict) -> list[str]:
    """`rows`: the shipped variant's commands (zoo/run.py), each with its rc and written `size`."""
    try:
        info = json.loads(info_json)
        savings, model_bytes = info["savings"], int(info["model_bytes"])
    except (ValueError, KeyError, TypeError) as e:
        return [f"no savings in info --json ({type(e).__name__})"]
    fails = []
    for cmd, method in PREDICTED.items():
        row = rows.get(cmd) or {}
        if row.get("rc") != 0 or row.get("size") is None or method not in savings:
            continue
        predicted = model_bytes - int(savings[method])
        if abs(row["size"] - predicted) > SLACK * row["size"] + FLOOR:
            fails.append(f"info predicted `{method}` writes {predicted / 1e6:.3g} MB, `{cmd}` wrote "
                         f"{row['size'] / 1e6:.3g} MB ({row['size'] / max(predicted, 1):.2f}x)")
    return fails
