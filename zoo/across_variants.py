"""The invariants judged across one model's variants, once all have run: 11 (a result does not
depend on the storage), 12 (16-bit storage costs no accuracy) and 3 (the plan does not depend on
the storage). Each returns (where, failure) pairs; a failure about one command's row is also
added to that row's own failures."""

from __future__ import annotations

from zoo import invariants, same_plan, variants

RESULT_COMMANDS = ("quant", "quant --inputs", "quant --dtype int4", "quant --dtype int4 --inputs")
HALF_VARIANTS = ("bf16", "fp16")


def _row(by_variant: dict, variant: str, cmd: str) -> dict:
    return by_variant.get(variant, {}).get("commands", {}).get(cmd, {})


def _distance(row: dict) -> float | None:
    return row["error"] if row.get("error") is not None else row.get("agreement")


def _half_width(half: dict, shipped: dict, draws: list | None = None) -> list[str]:
    fails = invariants.half_width_writes(half.get("rc"), shipped.get("rc"), draws)
    if half.get("error") is not None and shipped.get("error") is not None:
        fails += invariants.half_width_holds(half["error"], shipped["error"], draws)
    return fails


def judged(by_variant: dict, plans: dict[str, dict[str, str]], draws=None, shipped_plan=None) -> list[tuple[str, str]]:
    """`by_variant`: {variant: {"commands": {cmd: row}}}; `plans`: {cmd: {variant: plan json}};
    `draws`: variant -> invariant 12's draws' errors (zoo/draws.py), called only where one variant
    fails; `shipped_plan`: variant -> {"rc", "error"} of the shipped plan applied to that variant's
    weights (zoo/same_plan.py), called only where the draws fail it too."""
    found = []
    for cmd in RESULT_COMMANDS:  # invariant 11
        # the error, or where no output is float the share of equal elements
        errors = {v: _distance(_row(by_variant, v, cmd)) for v in variants.STORAGE
                  if _distance(_row(by_variant, v, cmd)) is not None}
        found += [(f"[storage] {cmd}", f) for f in invariants.same_results(errors)]
    shipped = _row(by_variant, "shipped", "quant")
    for v in HALF_VARIANTS:  # invariant 12
        half = _row(by_variant, v, "quant")
        fails = _half_width(half, shipped)
        if fails and draws is not None:  # one draw against another: ask the draws (issue 55)
            half["draws"] = draws(v)
            fails = _half_width(half, shipped, half["draws"])
        if fails and shipped_plan is not None:  # the same decisions on the same 16-bit weights
            half["shipped_plan"] = shipped_plan(v)
            if same_plan.no_worse_than_shipped_plan(half, half["shipped_plan"], invariants.HALF_FACTOR):
                fails = []
        half["failures"] = half.get("failures", []) + fails
        found += [(f"[{v}] quant", f) for f in fails]
    for cmd, plan_by_variant in plans.items():  # invariant 3
        same = {v: p for v, p in plan_by_variant.items() if v in variants.STORAGE}
        found += [(f"[storage] {cmd}", f) for f in invariants.same_plans(same)]
    return found
