"""The first stage: which float constants the plan leaves as they are, and why (said in each
record's `why`): a quantized model's own data, position tables, small weights and scalars,
what the selection leaves out (--include, --exclude, the budget's float32), tables no lowering
keeps lean, a transform's basis read before a log, overridable inputs and graph outputs, weights
TensorRT reads unquantized, values no scale represents; and the notes a selection that changes
nothing gets."""

from __future__ import annotations

import fnmatch

import numpy as np
import onnx

from onnx_graphsurgeon.ir.tensor import SparseValues

from ...graph_utils import ConstantSite, consumers, graph_outputs_holding, held_values, read_values
from ..options import QuantOptions
from ..chunked import all_finite
from .candidate import Candidate, PlanContext
from .fused_forms import table_refusal
from .transform_basis import transform_basis
from .weights import already_quantized, float16_for_tensorrt, position_table, tensorrt_refusal

# The budget's float32 and kept weights (options.allocation) are refused in the words its plans
# said when it passed them on as --exclude patterns: plans stay byte-identical (bench/plan_snapshot.py).
EXCLUDED = "matched by --exclude"
FP16_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def matches(site: ConstantSite, patterns: tuple[str, ...]) -> bool:
    """Whether a glob of `patterns` (--include, --exclude) matches the weight's name or the op
    type of one of its readers."""
    ops = {n.op for n, _ in consumers(site)}
    return any(fnmatch.fnmatchcase(site.name, p) or any(fnmatch.fnmatchcase(op, p) for op in ops)
               for p in patterns)


def quantizes_activations(scopes) -> bool:
    """Whether the model quantizes its activations (QuantizeLinear nodes: a QDQ model)."""
    return any(node.op == "QuantizeLinear" for scope in scopes for node in scope.graph.nodes)


def refuse(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """Stage 2: the candidates that are not left as they are (`refusal` under each weight's own
    options; `value_refusal`), each refused weight's record saying why. Where `ctx.unchecked`
    is a set, a weight whose values only the NaN/Inf check would read is not read here: its
    name is added, and the planner checks it on the measurements' read (planner.py)."""
    kept = []
    for c in candidates:
        no_quantized_form = float16_for_tensorrt(c.site, c.options)
        if c.options.fp16 and not c.options.levels and c.site.onnx_dtype == onnx.TensorProto.FLOAT:
            # stored as float16: a value past 65504 would become inf (written with --no-verify)
            no_quantized_form = no_quantized_form or "--fp16"
        reason = ctx.planning.refusal(c.site, ctx.scopes, ctx.options, ctx.overridable, qdq=True)
        if not reason and ctx.unchecked is not None and not no_quantized_form:
            ctx.unchecked.add(c.name)
        elif not reason:
            reason = value_refusal(c.site, float16_because=no_quantized_form)
        if reason:
            small = f"below --min-elements ({c.options.min_elements})"
            ctx.records[c.name].why = small if reason == "small" else reason
        else:
            kept.append(c)
    return kept


def refusal(site: ConstantSite, scopes, options: QuantOptions, overridable: frozenset[str],
            activations_quantized: bool = False) -> str | None:
    """Why `site` is left as it is under `options` (the weight's own: forms.site_form), or
    None; "small" below --min-elements. `activations_quantized` (quantizes_activations): its
    float weights are left alone unless --include names them, since weight rounding would
    stack on activation rounding."""
    reason = already_quantized(site) or position_table(site)
    if reason:
        return reason
    if isinstance(held_values(site.tensor), SparseValues):  # its dense values read as zeros here
        return "a sparse initializer: left as it is"
    if site.num_elements < options.min_elements:
        return "small"
    if not site.shape:
        return "a scalar: nothing to group or gain"
    # a 16-bit weight under fp16 (--fp16, or the int4 rule's for biases) is left in its 16 bits by
    # records.float16_record, as a candidate: the memory-at-load rule counts it as its float32 twin's
    if options.fp16 and site.onnx_dtype not in FP16_TYPES:
        return "--fp16 applies to float32 weights only"
    if options.levels and site.onnx_dtype == onnx.TensorProto.BFLOAT16:
        return "--levels: bfloat16 weights are left alone"
    if options.include and not matches(site, options.include):
        return "not matched by --include"
    if options.exclude and matches(site, options.exclude):
        return EXCLUDED
    if options.allocated(site.name) in ("float32", "kept"):  # kept: a float16/bfloat16 weight as it is
        return f"allocated {'float32' if options.allocated(site.name) == 'float32' else 'its own type'} by the budget"
    if not options.include and (table := table_refusal(site, options)):
        return table
    if not options.include and (basis := transform_basis(site)):
        return basis
    if activations_quantized and not options.include:
        return "the model quantizes its activations (QDQ): --include NAME quantizes this weight too"
    if site.name in overridable:
        return "overridable graph input"
    if graph_outputs_holding(scopes, site.value):
        return "graph output"
    if not site.value.outputs:
        return "no consumer"
    float32 = site.onnx_dtype == onnx.TensorProto.FLOAT  # under tensorrt: float16 instead (float16_for_tensorrt)
    if options.target == "tensorrt" and not (options.fp16 or options.levels or float32):
        return tensorrt_refusal(site, options)
    return None


def value_refusal(site: ConstantSite, float16_because: str | None = None) -> str | None:
    """Why the weight's values keep it as it is, read once: NaN or Inf, which no scale
    represents; for a weight to be stored as float16 (`float16_because`, the reason it would
    be), magnitudes float16 cannot hold."""
    values = read_values(site.tensor)
    if not all_finite(values):
        return "holds NaN or Inf values"
    if float16_because and np.abs(values).max() > np.finfo(np.float16).max:
        return f"{float16_because}; values beyond float16's range"
    return None


def selection_notes(options: QuantOptions, records) -> list[str]:
    """A selection that matches no weight (or every weight) says so: exit 0 with nothing
    quantized must not look like success. So do weights left alone as a quantized model's own
    data or as position tables, and a QDQ model's weights."""
    notes = []
    rewritten = sum(r.why.startswith("already quantized, rewritten") for r in records)
    if rewritten:
        notes.append(f"{rewritten} already quantized Cast -> Mul weight{'s' * (rewritten != 1)} rewritten exactly to "
                     "stay 8-bit at load")
    for kind, start in (("already quantized (scales and zero points of quantized ops)", "already quantized:"),
                        ("rotary position tables", "a rotary position table"),
                        ("left float because the model quantizes its activations (QDQ; --include to quantize)",
                         "the model quantizes its activations")):
        count = sum(r.why.startswith(start) for r in records)
        if count:
            notes.append(f"{count} constant{'s' * (count != 1)} {kind}: left as they are")
    large = [r for r in records if not r.why.startswith("below --min-elements")]
    if options.include and large and all(r.why == "not matched by --include" for r in large):
        notes.append(f"--include {' '.join(options.include)} matched no weight")
    if options.exclude and large and all(r.why == EXCLUDED for r in large):
        notes.append(f"--exclude {' '.join(options.exclude)} matched every weight")
    return notes
