"""One planning run per graph: every question about a weight's fate asks it, and each answer is
computed once. The planner (planner.py), the opset the options need (`required_opset`, asked
before planning: the model is upgraded to it), whether they change any weight
(`any_weight_to_change`), `info`'s estimates (estimates.py, the quantize pass's `estimate`),
plan_edits.py and the budget's plans all ask `planning_for(graph)` for a weight's form
(forms.site_form), grouping (forms.choose_scheme), lowering (rules.lowering_for) and refusal
(refusals.refusal), instead of deriving them again: one quant run on a 4-weight model ran choose_scheme 12 times,
lowering_for 8 and site_form 6; now 4, 8 (4 at the plan's opset, 4 at the one the opset
question asks at) and 5.

A Planning belongs to the graph in one state: the graph's nodes, their inputs, attributes and
constants (tests/test_planning.py). A pass that rewires or replaces any of them (a merge, the
quantization itself) leaves a new state, which the next question plans afresh; an upgraded
model is another graph. The Planning holds only weak references to what it saw, so the float
weights a quantized graph let go of are freed as before, and it lives as long as its graph.

Answers are memoised per (weight, options, opset) and whole plans per (options, opset,
overridable inputs) where no measured input takes part (planner.plan_weights)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, collect_constants, iter_scopes
from ..options import FLOAT_TYPES, QuantOptions, Scheme, dq_min_opset
from .candidate import Form
from .forms import choose_scheme, site_form
from .int4_paths import transposed_gemm_fuses
from .load_memory import KEPT_OPSET, TRANSPOSED_GEMM_OPSET, applies as memory_rule_applies, fused_gemm, kept_in_memory
from .model_facts import ModelFacts
from .refusals import quantizes_activations, refusal
from .rules import lowering_for
from .weights import RECURRENT_DQ_OPSET, lean_forms, recurrent_weight

T = TypeVar("T")
_ATTRIBUTE = "_onnxsurgery_planning"  # where a graph keeps its Planning (its lifetime is the graph's)


def options_key(options: QuantOptions) -> tuple:
    """`options` as a hashable value: every field, and what __post_init__ decided."""
    held = options.__dict__  # asked thousands of times a run (a 1245-weight detector: 3635)
    fields = tuple((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in
                   ((k, held[k]) for k in _option_names()))
    return fields + (options.auto_scheme, options.auto_symmetric)


@functools.cache
def _option_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(QuantOptions))


class Planning:
    """The answers of one planning run on a graph in one state (module doc)."""

    def __init__(self, graph: gs.Graph, state: tuple, seen: list):
        self.facts = ModelFacts(graph)
        self.state = state
        self._seen = [weakref.ref(o) for o in seen]  # the state's ids name live objects only
        self._answers: dict[tuple, object] = {}
        self._qdq: bool | None = None

    def alive(self) -> bool:
        return all(ref() is not None for ref in self._seen)

    def once(self, key: tuple, compute: Callable[[], T]) -> T:
        if key not in self._answers:
            self._answers[key] = compute()
        return self._answers[key]  # type: ignore[return-value]

    def quantizes_activations(self, scopes) -> bool:
        if self._qdq is None:
            self._qdq = quantizes_activations(scopes)
        return self._qdq

    def form(self, site: ConstantSite, options: QuantOptions) -> Form:
        """forms.site_form: the weight's own options under `options`."""
        return self.once(("form", id(site.tensor), options_key(options)),
                         lambda: site_form(site, options, self.facts))

    def scheme(self, site: ConstantSite, options: QuantOptions) -> Scheme:
        """forms.choose_scheme: the weight's grouping under its own `options`."""
        return self.once(("scheme", id(site.tensor), options_key(options)), lambda: choose_scheme(site, options))

    def lowering(self, site: ConstantSite, options: QuantOptions, scheme: Scheme, opset: int) -> str:
        """rules.lowering_for at `opset`."""
        return self.once(("lowering", id(site.tensor), options_key(options), scheme, opset),
                         lambda: lowering_for(site, options, scheme, opset, self.facts))

    def refusal(self, site: ConstantSite, scopes, options: QuantOptions, overridable: frozenset[str],
                qdq: bool) -> str | None:
        """refusals.refusal under the weight's own options (`form`); `qdq`: a QDQ model's weights
        are refused too (the planner's question; the estimate's is not)."""
        opts = self.form(site, options).options
        return self.once(("refusal", id(site.tensor), options_key(options), overridable, qdq),
                         lambda: refusal(site, scopes, opts, overridable, qdq and self.quantizes_activations(scopes)))

    def plan(self, key: tuple, make: Callable[[], T]) -> T:
        """A whole plan, made once per `key`; each asker gets its own copy (plans are edited). Its
        importance arrays (read, never edited) are the measurement's own objects: quantize.py's
        `remembering` knows a weight's clipping picks by them, and copies made the pass search
        every weighted 4-bit weight again (vit_focus int4: a third of its clipping search)."""
        made = self.once(("plan", *key), make)
        return copy.deepcopy(made, {id(a): a for a in getattr(made, "importance", {}).values()})


def _state(graph: gs.Graph) -> tuple[tuple, list]:
    """What the answers depend on, by identity: every node's op, domain, inputs, outputs and
    attributes, each constant's name, shape and type, each scope's inputs and outputs; and the
    objects named (held weakly by the Planning, so that an id is never one of a freed object)."""
    seen: list = []
    parts = []

    def tensor(t):
        seen.append(t)
        if isinstance(t, gs.Constant):
            return id(t), t.name, tuple(t.shape), str(t.dtype)
        return id(t), t.name

    for scope in iter_scopes(graph):
        g = scope.graph
        seen.append(g)
        nodes = []
        for n in g.nodes:
            seen.append(n)
            attrs = tuple((k, tensor(v) if isinstance(v, gs.Constant) else id(v)) for k, v in n.attrs.items())
            nodes.append((id(n), n.op, n.domain, tuple(map(tensor, n.inputs)), tuple(map(tensor, n.outputs)), attrs))
        parts.append((id(g), tuple(nodes), tuple(map(tensor, g.inputs)), tuple(map(tensor, g.outputs))))
    return tuple(parts), seen


def planning_for(graph: gs.Graph) -> Planning:
    """The planning run of `graph` as it is now: the one asked before where nothing changed since."""
    state, seen = _state(graph)
    known = graph.__dict__.get(_ATTRIBUTE)
    if known is not None and known.state == state and known.alive():
        return known
    planning = Planning(graph, state, seen)
    setattr(graph, _ATTRIBUTE, planning)
    return planning


def required_opset(opts: QuantOptions, graph: gs.Graph | None = None) -> int:
    """The opset the lowering asked for needs (the API upgrades a model below it): DequantizeLinear
    with blocks or 4-bit types needs 21; the default's lean form of recurrent weights (in `graph`)
    needs 13; every other lowering works from opset 7 (or 11).

    Asked before planning, of every weight of the options' size whatever the selection: the
    opset a plan is made at can change its lowerings, so it is not derived from the plan (that
    would move some plans: a weight excluded or measured accurate would no longer upgrade). Each
    weight's grouping and lowering are the planning run's (`planning_for`)."""
    if opts.fp16 or opts.levels:
        return 1
    if opts.allocated_int4:  # the weights allocated 4 bits need what 4-bit options need
        return max(required_opset(opts.as_four_bit(), graph), required_opset(opts.changed(allocation=None), graph))
    if opts.lowering == "dq" or (opts.lowering == "auto" and opts.stays_quantized):
        return dq_min_opset(opts)
    if graph is not None and opts.lean_default:
        planning = planning_for(graph)
        weights = [site for site in collect_constants(graph)
                   if site.num_elements >= opts.min_elements]
        if any(len(site.shape) == 2 and fused_gemm(site) and transposed_gemm_fuses(site, planning.scheme(site, opts))
               for site in weights):
            return TRANSPOSED_GEMM_OPSET  # a large one, fused (load_memory.UNFUSED_GEMM_ELEMENTS)
        if any(recurrent_weight(site) for site in weights):
            return RECURRENT_DQ_OPSET
        planned = lean_forms((site, planning.lowering(site, opts, planning.scheme(site, opts), KEPT_OPSET))
                             for site in weights if site.onnx_dtype in FLOAT_TYPES and site.shape)
        if memory_rule_applies(graph, opts) and kept_in_memory(planned):
            return KEPT_OPSET  # per-channel DequantizeLinear (load_memory.py)
    return 1


def any_weight_to_change(graph: gs.Graph, options: QuantOptions, overridable: frozenset[str]) -> bool:
    """Whether `options` would change any weight of `graph` (a model whose weights are all
    quantized already, or all excluded, needs no opset upgrade: its rewrite alone moved an
    already-quantized MiniLM's batch-4 outputs by 8.4%). The planner's first two stages, asked
    of each weight until one is not refused (refusals.py, forms.site_form)."""
    planning = planning_for(graph)

    def ask() -> bool:
        scopes = list(iter_scopes(graph))
        return any(planning.refusal(site, scopes, options, overridable, qdq=True) is None
                   for site in collect_constants(graph, scopes) if site.onnx_dtype in FLOAT_TYPES)
    # asked twice of one workspace by quant (its reference's start, then the opset it needs)
    return planning.once(("any_weight_to_change", options_key(options), overridable), ask)
