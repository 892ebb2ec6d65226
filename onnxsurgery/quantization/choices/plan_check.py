"""A plan the planner did not make here, checked against the graph (`check_plan`): a plan file's
records (quant --plan), or the budget's plan (api/budget.py), applied the same way. Every record
must name a float constant of the model and ask for something its readers, the opset and the
target can take; the weights it does not list stay float."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from ...errors import PlanError
from ...graph_utils import ConstantSite, collect_constants, consumers, iter_scopes
from ..axes import choose_axes
from ..calibration import Calibration
from ..lowerings import REGISTRY
from ..options import FLOAT_TYPES, QuantOptions, Scheme
from ..plan import Plan, WeightPlan
from ..vocabulary import INTEGER_DTYPES
from .records import float_record, planned_bytes
from .refusals import refusal
from .weights import tensorrt_refusal


def check_plan(graph: gs.Graph, records: list[WeightPlan] | Plan, opset: int, overridable: frozenset[str],
               target: str = "any", calibration: Calibration | None = None) -> Plan:
    """The plan `records` ask for, each checked against `graph` at `opset` (PlanError naming the
    weight otherwise), completed with the graph's facts (consumers, shape, bytes, axis where left
    out); float constants the records do not name stay float. Given a Plan (the budget's), its
    notes and the planner's figures (details, importance) come along. With `calibration`, the
    weights whose records say GPTQ are measured on its inputs."""
    planner = records if isinstance(records, Plan) else None
    if planner is not None:
        records = planner.weights
    scopes = list(iter_scopes(graph))
    sites = {s.name: s for s in collect_constants(graph, scopes) if s.onnx_dtype in FLOAT_TYPES}
    given = {r.name: r for r in records}
    unknown = [name for name in given if name not in sites]
    if unknown:
        raise PlanError(f"plan weight '{unknown[0]}': the model has no float constant of that name")
    planned = []
    for name, site in sites.items():
        record = given.get(name)
        if record is None:
            planned.append(float_record(site))
            planned[-1].why = "not in the plan"
            continue
        record.consumers, record.shape, record.bytes_before = (sorted({n.op for n, _ in consumers(site)}),
                                                               list(site.shape), site.nbytes)
        if record.changes:
            _check_record(site, record, scopes, opset, overridable, target, calibration)
        record.bytes_after = planned_bytes(record, site)
        record.why = record.why or "from the plan"
        planned.append(record)
    if calibration is not None and any(r.rounding == "gptq" for r in planned):
        # the weights the planner would have measured: every integer one (planner.plan_weights)
        calibration.plan([sites[r.name] for r in planned if r.dtype in INTEGER_DTYPES])
    if planner is None:
        return Plan(planned, opset, target)
    return Plan(planned, opset, target, list(planner.notes), dict(planner.details), importance=planner.importance)


def _check_record(site: ConstantSite, r: WeightPlan, scopes, opset: int, overridable, target: str,
                  calibration: Calibration | None) -> None:
    def refuse(why: str):
        raise PlanError(f"plan weight '{r.name}': {why}")

    stand_in = QuantOptions(min_elements=1, target="any")  # what refusal() checks beyond the options
    reason = refusal(site, scopes, stand_in, overridable)
    if reason:
        refuse(f"cannot be changed: {reason}")
    if r.dtype == "float16" and site.onnx_dtype != onnx.TensorProto.FLOAT:
        refuse("float16 storage is for float32 weights")
    if r.dtype == "float16":  # a Cast from float16: every target reads it
        return
    _check_axis(site, r, refuse)
    if r.lowering == "levels":
        return  # float values snapped in place: the graph is unchanged
    if r.granularity == "block" and site.shape[r.axis] % r.block_size:
        refuse(f"block_size {r.block_size} does not divide axis {r.axis} ({site.shape[r.axis]})")
    scheme = Scheme(r.granularity, r.axis, r.block_size)
    lowering = REGISTRY[r.lowering]
    why = lowering.fits(site, scheme, r.dtype, opset)
    if why:
        refuse(f"lowering {r.lowering} does not fit: {why}")
    if opset < lowering.min_opset(r.dtype, r.granularity):
        refuse(f"lowering {r.lowering} with {r.dtype}/{r.granularity} needs opset "
               f"{lowering.min_opset(r.dtype, r.granularity)}")
    if r.rounding == "gptq" and calibration is None:
        refuse("rounding gptq needs --calibration")
    if target == "tensorrt":
        trt = QuantOptions(dtype=r.dtype, target="tensorrt", symmetric=True, min_elements=1)
        why = tensorrt_refusal(site, trt) if r.dtype in ("int8", "int4") else f"TensorRT takes no {r.dtype} weights"
        if why is None and (r.lowering not in ("dq", "dq_equalized") or not r.symmetric):
            why = "TensorRT takes symmetric DequantizeLinear weights only"
        if why:
            refuse(why)


def _check_axis(site: ConstantSite, r: WeightPlan, refuse) -> None:
    """Fill in an axis left out (the consumer's, as the default chooses), check one given."""
    if r.granularity == "tensor":
        r.axis = None
        return
    if r.axis is None:
        channel_axis, block_axis = choose_axes(site)
        r.axis = block_axis if r.granularity == "block" else channel_axis
    if not -len(site.shape) <= r.axis < len(site.shape):
        refuse(f"axis {r.axis} is out of range for shape {list(site.shape)}")
    r.axis %= len(site.shape)


def plan_opset(records: list[WeightPlan] | Plan) -> int:
    """The opset the records' lowerings need (lowerings.base.Lowering.min_opset); a Plan the
    planner made (the budget's) needs the opset it was made at, which its lowerings were chosen for."""
    if isinstance(records, Plan):
        return max(records.opset, plan_opset(records.weights))
    return max((REGISTRY[r.lowering].min_opset(r.dtype, r.granularity) for r in records
                if r.lowering in REGISTRY), default=1)
