"""Invariant 12's last look: the shipped model's plan applied to a 16-bit variant's weights.

A 16-bit variant holds other weights than the model as shipped, so its `quant` error can differ
with the same decisions: where int8 rounding lands moves the error 3x on tumor_vgg16 (0.049-0.150
over draws), and SLANet+'s generated verification sample changes its output's length under some
roundings. The draws (zoo/draws.py) ask that statistically; this asks it directly: the variant's
own plan against the shipped plan on the same 16-bit weights. If the shipped decisions do no
better there, the storage did not make the plan worse (found 2026-11-30: both of the zoo's
invariant-12 failures gave the same error, or the same refusal, with the shipped plan).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from zoo import invariants

BF16_SUFFIX = "__bf16"  # zoo/variants.py's bf16: weight W stored as W__bf16, then Cast to W


def transplanted(shipped_plan: str, variant_plan: str) -> dict:
    """The shipped model's plan (`quant --dry-run --json` output) with its weights renamed to the
    variant's and checked against it: a weight the shipped plan stores as float16 takes the
    variant's own entry (a 16-bit weight stays in its own 16 bits: no float16 choice to make)."""
    plan = json.loads(shipped_plan)
    own = {w["name"]: w for w in json.loads(variant_plan)["weights"]}
    weights = []
    for w in plan["weights"]:
        name = w["name"] + BF16_SUFFIX if w["name"] + BF16_SUFFIX in own else w["name"]
        if name not in own:
            raise KeyError(f"the variant has no weight {w['name']!r}")
        weights.append(own[name] if w["dtype"] == "float16" else {**w, "name": name})
    return {**plan, "weights": weights}


def no_worse_than_shipped_plan(own: dict, same_plan: dict, factor: float) -> bool:
    """`own`: the variant's `quant` row (rc, error); `same_plan`: the shipped plan applied to the
    variant's weights (rc, error). True where the variant's own decisions cost no more than
    `factor` times the shipped decisions on the same weights, or both were refused."""
    if own.get("rc") == 2:
        return same_plan.get("rc") == 2
    if own.get("error") is None or same_plan.get("error") is None:
        return False
    return own["error"] <= factor * same_plan["error"]


def applied(variant: Path, shipped_plan: str | None, stem: Path, quant: Callable, judge: Callable) -> dict:
    """The shipped plan applied to `variant`: {"rc", "error"} ({"rc": None, "note"} where there is
    no plan to compare). `quant(*args)` runs `quant VARIANT *args` (zoo/run.py's measured: .rc,
    .stdout, .stderr); `judge(out)` evaluates a written file on the report set ({"error": ...});
    files are written beside `stem`."""
    own = quant(stem.with_suffix(".own_plan.onnx"), "--dry-run", "--json")
    if shipped_plan is None or own.rc != 0:
        return {"rc": None, "note": "no plan to compare"}
    try:
        plan = transplanted(shipped_plan, own.stdout)
    except KeyError as e:
        return {"rc": None, "note": str(e)}
    plan_file = stem.with_suffix(".shipped_plan.json")
    plan_file.write_text(json.dumps(plan))
    out = stem.with_suffix(".shipped_plan.onnx")
    r = quant(out, "--plan", plan_file)
    if r.rc != 0 or not out.exists():
        return {"rc": r.rc, "note": invariants._last(r.stderr)}
    return {"rc": 0, "error": judge(out).get("error")}
