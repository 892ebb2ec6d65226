"""The fourth stage: memory at load (load_memory.py's estimates, applied to the candidates).
Where the model's float weights would not fit where it runs, every weight planned in a form that
turns float at load is kept quantized instead; where the int8 default's forms would hold more
than the float model, the largest MatMul and Conv weights are; and what the accurate chain may
spend at load (lean.py's `room_at_load`) where nothing kept pays for it."""

from __future__ import annotations

import dataclasses

import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import collect_constants, iter_scopes
from ..options import FLOAT_TYPES, QuantOptions
from .candidate import Candidate
from .weights import small_weight
from .load_memory import (FIT_HOW, FIT_REASON, KEPT_OPSET, applies as memory_rule_applies, float_weights_fit,
                          fuses_into_nbits, kept_in_memory, kept_reason, kept_scheme, machine_memory, room_at_load,
                          transposed_gemm)
from .weights import lean_forms
from .int4_paths import transposed_gemm_fuses
from .model_facts import ModelFacts


def at_load(candidates: list[Candidate], graph: gs.Graph, options: QuantOptions, opset: int,
            facts: ModelFacts) -> tuple[list[Candidate], float | None]:
    """The candidates with those kept quantized in memory lowered as `dq`, and the cap on what
    the accurate chain spends at load (None: its share alone). The same wherever the weights
    are stored (load_memory.py)."""
    sites = collect_constants(graph, list(iter_scopes(graph)))
    if options.target != "tensorrt" and opset >= KEPT_OPSET and not float_weights_fit(sites, options.memory):
        return _keep_to_fit(candidates, sites, options.memory), None
    if memory_rule_applies(graph, options) and opset >= KEPT_OPSET:
        return _keep_in_memory(candidates), None
    if options.lean_default and facts.kv_cache:  # nothing kept in memory to pay for the chain:
        # it spends only what the plan saves at load (SmolLM2-135M's optimum export, int8: 1.18x ->
        # 1.04x the float model's memory, top-1 97.1% -> 98.5% on held-out prompts)
        return candidates, room_at_load(planned_forms(candidates))
    return candidates, None


def planned_forms(candidates: list[Candidate]) -> list:
    """Each candidate's weight with its lowering, `cast` for float16, a `lean` one's lean form
    (rules.lean_forms): what load_memory estimates."""
    return lean_forms((c.site, "cast" if c.float16 else c.lowering) for c in candidates)


def _keep_in_memory(candidates: list[Candidate]) -> list[Candidate]:
    """The MatMul (and Conv) weights that load_memory keeps quantized in memory lowered as `dq`;
    a lean Gemm's B read with transB among them where the int8 default once stored it transposed
    in blocks for MatMulNBits (int4_paths.transposed_gemm_fuses, with the blocks it is grouped in)."""
    gemms = {c.name for c in candidates if c.lowering == "lean" and not c.float16 and c.scheme is not None
             and transposed_gemm(c.site) and transposed_gemm_fuses(c.site, c.scheme)}
    kept = {site.name for site in kept_in_memory(planned_forms(candidates), left_lean=small_weight,
                                                 gemm_kept=lambda site: site.name in gemms)}
    return [dataclasses.replace(c, scheme=kept_scheme(c.site), lowering="dq", reason=kept_reason(c.site))
            if c.name in kept else c for c in candidates]


def _keep_to_fit(candidates: list[Candidate], sites, memory: int | None) -> list[Candidate]:
    """Every float32 weight planned in a form that turns float at load (lean, scaled, arith)
    lowered as `dq` per channel instead: the float weights would not fit where the model runs
    (load_memory.float_weights_fit). Weights the plan stores as float16 (small ones) keep their
    Cast: they are a small share of such a model."""
    from ...report import human_bytes

    size = human_bytes(sum(site.nbytes for site in sites if site.onnx_dtype in FLOAT_TYPES))
    where = human_bytes(machine_memory() if memory is None else memory)
    kept = []
    for c in candidates:
        if c.lowering in ("lean", "scaled", "arith") and not c.options.four_bit and \
                c.site.onnx_dtype == onnx.TensorProto.FLOAT:
            reason = FIT_REASON.format(how=FIT_HOW[fuses_into_nbits(c.site)], size=size, memory=where)
            c = dataclasses.replace(c, scheme=kept_scheme(c.site), lowering="dq", float16=False, why=reason,
                                    reason=reason)
        kept.append(c)
    return kept
