"""A plan edited as a person would: the fields that follow from a record's dtype, derived again
against the graph (plan.py's module doc says when).

`quant --dry-run --json` writes every field of every record. A person who wants one weight in
4 bits changes its `"dtype"` and nothing else; the record then still says, say, lowering
`scaled` (int8 with one scale per output channel, after the reader), which no 4-bit weight can
take. Refusing that is correct and useless. Here such a record is completed the way the default
would store that weight at that dtype (the planner run with `--dtype` set to it), so that the
edit means what it says; fields the person did set and that fit are kept.

Derived where: a field is null or left out; or the record's lowering does not fit the weight at
the record's dtype but does at the other integer width, which is what an edit of the dtype alone
leaves behind. A record whose lowering fits neither way is left as it is: the check after
(plan_check.check_plan) refuses it, naming the weight, as it refuses any hand-written mistake.
"""

from __future__ import annotations

import dataclasses

import onnx_graphsurgeon as gs

from ..errors import PlanError
from ..graph_utils import collect_constants
from .choices.planner import plan_weights
from .lowerings import REGISTRY
from .options import FLOAT_TYPES, QuantOptions, Scheme
from .plan import FOLLOWERS, Plan, WeightPlan, needs_derivation
from .vocabulary import INTEGER_DTYPES

def derive_records(graph: gs.Graph, records: list[WeightPlan], opset: int, overridable: frozenset[str],
                   options: QuantOptions) -> list[WeightPlan]:
    """Copies of `records`, each integer record whose dtype-following fields are missing or
    stale completed from the default plan for its weight at its dtype (module doc). `options`:
    the run's (its target, runtime and memory are what the default plans for)."""
    out, todo = [], {}
    for record, site in _with_sites(graph, records, opset):
        if site is not None and needs_derivation(record):  # planned with the fields the person set
            asked = (record.dtype, record.granularity, record.symmetric, record.block_size)
            todo.setdefault(asked, []).append(record)
        out.append(record)
    for (dtype, *fixed), wanting in todo.items():
        defaults = _default_records(graph, dtype, opset, overridable, options, {r.name for r in wanting}, *fixed)
        for record in wanting:
            default = defaults.get(record.name)
            if default is None:
                raise PlanError(f"plan weight '{record.name}': cannot be stored as {dtype}: "
                                f"{_why_not(graph, record.name, dtype, opset, overridable, options)}")
            for key in FOLLOWERS:
                if getattr(record, key) is None:
                    setattr(record, key, getattr(default, key))
            if record.granularity != "block":
                record.block_size = None
            record.why = f"dtype {dtype} from the plan, the rest as the default stores it: {default.why}"
    return out


def derived_dtypes(graph: gs.Graph, records: list[WeightPlan] | Plan, opset: int) -> set[str]:
    """The dtypes of the records `derive_records` would complete (the opset they need is what
    the default needs for that dtype: api.quant_steps.needed_opset); a Plan's records (the
    budget's, from the planner) have every field."""
    if isinstance(records, Plan):
        records = records.weights
    return {r.dtype for r, site in _with_sites(graph, records, opset) if site is not None and needs_derivation(r)}


def _with_sites(graph: gs.Graph, records: list[WeightPlan], opset: int):
    """(copy of each record, its weight's site or None), with the fields of a record whose
    lowering does not fit its dtype cleared (`_stale`)."""
    sites = {s.name: s for s in collect_constants(graph) if s.onnx_dtype in FLOAT_TYPES}
    for record in records:
        record = dataclasses.replace(record)
        site = sites.get(record.name)
        if site is not None and record.dtype in INTEGER_DTYPES and _stale(record, site, opset):
            for key in FOLLOWERS:  # a lowering that does not fit this dtype takes its scheme with it
                setattr(record, key, None)
            record.why = ""
        yield record, site


def _stale(record: WeightPlan, site, opset: int) -> bool:
    """The record's lowering fits its weight at another integer dtype but not at its own: what an
    edit of the dtype alone leaves (a lowering that fits no dtype is the check's to refuse)."""
    lowering = REGISTRY.get(record.lowering)
    if lowering is None or record.granularity is None:
        return False
    axis = record.axis
    if record.granularity != "tensor" and axis is not None and -len(site.shape) <= axis < len(site.shape):
        axis %= len(site.shape)
    scheme = Scheme(record.granularity, axis, record.block_size)
    try:
        return lowering.fits(site, scheme, record.dtype, opset) is not None and any(
            lowering.fits(site, scheme, other, opset) is None for other in INTEGER_DTYPES if other != record.dtype)
    except (IndexError, TypeError, ValueError, ZeroDivisionError):  # a scheme the check after refuses
        return False


def _default_records(graph: gs.Graph, dtype: str, opset: int, overridable: frozenset[str], options: QuantOptions,
                     names: set[str], granularity: str | None = None, symmetric: bool | None = None,
                     block_size: int | None = None) -> dict[str, WeightPlan]:
    """What the default stores each of `names` as at `dtype` (and the granularity, symmetry and
    block size a person set, as `--granularity` etc. would ask): the records of the planner's run
    with those options (every size: a person may ask for a small weight), that store `dtype`.
    Where the default would keep a weight float16 (small weights under the int8 default), the
    plain blockwise scheme of `--granularity block` instead, since the person asked for integers."""
    found: dict[str, WeightPlan] = {}
    base = dict(dtype=dtype, min_elements=1, target=options.target, runtime=options.runtime, memory=options.memory,
                granularity=granularity, symmetric=symmetric)
    if block_size is not None:
        base["block_size"] = block_size
    for asked in (base, {**base, "granularity": granularity or "block"}):
        try:
            plan = plan_weights(graph, QuantOptions(**asked), opset, overridable)
        except (PlanError, ValueError):
            continue
        for record in plan.weights:
            if record.name in names and record.name not in found and record.dtype == dtype:
                found[record.name] = record
        if names <= found.keys():
            break
    return found


def _why_not(graph: gs.Graph, name: str, dtype: str, opset: int, overridable, options: QuantOptions) -> str:
    """Why the default leaves `name` float at `dtype` (the planner's reason), for the refusal."""
    try:
        plan = plan_weights(graph, QuantOptions(dtype=dtype, min_elements=1, target=options.target), opset, overridable)
    except (PlanError, ValueError) as e:
        return str(e)
    record = plan.record(name)
    return (record.why if record is not None and record.why else "no lowering takes it") + \
        " (set its \"dtype\" to \"float16\" or \"float\")"

