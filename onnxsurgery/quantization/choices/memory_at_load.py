"""The fourth stage: memory at load (load_memory.py's estimates, applied to the candidates).
Where the model's float weights would not fit where it runs, every weight planned in a form that
turns float at load is kept quantized instead; where the int8 default's forms would hold more
than the float model, the largest MatMul and Conv weights are; and what the accurate chain may
spend at load (lean.py's `room_at_load`) where nothing kept pays for it."""

from __future__ import annotations

import dataclasses

import onnx_graphsurgeon as gs

from ...graph_utils import collect_constants, iter_scopes
from ..options import FLOAT_TYPES, QuantOptions
from .candidate import Candidate
from .weights import small_weight
from .load_memory import (FIT_HOW, FIT_REASON, KEPT_OPSET, applies as memory_rule_applies, as_float32,
                          float_weights_fit, fuses_into_nbits, held_bytes, kept_in_memory, kept_reason, kept_scheme,
                          machine_memory, matmul_weight, room_at_load, transposed_gemm)
from .weights import lean_forms
from .float16_lean import float16_kept
from .int4_paths import transposed_gemm_fuses, unfused_reason
from ..lowerings.weight_readers import effective_readers, through_casts
from .fusion_after import unfused_after
from ..lowerings import REGISTRY
from .model_facts import ModelFacts
from .normalized_input import reads_normalized

# A MatMul weight kept is quantized as its lean form is, input rows equalized (the reader's
# input times r, the weight's rows divided by r before the scales per output channel: `scaled`'s
# integers and scales, dequantized before the reader instead of scaled after it), rather than
# plain per output channel: the memory rule then costs such a weight only what onnxruntime's
# fused kernel does, where it fuses (issue 55: "no model whose float-at-load form already holds
# under 1.0x pays more error for less memory"). Zoo, relative L2 on the tune / report sets, plain
# -> equalized: vit_focus (72 kept, lean at 0.99-1.00x its original's memory) 0.0109 / 0.0218 ->
# 0.0100 / 0.0098 (lean 0.0094 / 0.0134), tumor_vgg16 (two dense weights, lean at 0.98-1.00x)
# 0.091 / 0.081 -> 0.082 / 0.042, sk_mlp_digits 0.0049 / 0.0029 -> 0.0019 / 0.0022 (onnx-shrink-ray
# per channel 0.0022), PP-OCRv4 rec on bench/accuracy.py's text 0.121 -> 0.116; but PP-OCRv6 rec
# (seven attention and MLP linears) 0.061 / 0.023 -> 0.062 / 0.034 (its best peer 0.21). Memory
# at load and latency as before (0.62-0.99x, 1.04-1.16x; sk_mlp_digits 1.72x of 0.13 ms). Kept
# Conv and Gemm weights stay plain: as their lean form's integers oww_embedding (five Convs) went
# 0.0122 / 0.0121 -> 0.0133 / 0.0143, crepe_tiny (its classifier Gemm) 0.0046 / 0.0054 -> 0.0048 /
# 0.0055 (unless behind a normalization, below).
EQUALIZED_KEPT = "; input rows equalized first, as the lean form's"
# A kept Conv behind a normalization likewise (normalized_input.py): magika_v3, tune / report
# 0.00939 / 0.01182 -> 0.00725 / 0.00676 (lean 0.00725 / 0.00676; onnx-shrink-ray 0.0073 / 0.00657),
# at load 0.478x its original's either way (axis8, three fresh processes each)
NORMALIZED_KEPT = " (a Conv reading a normalization's output)"
# Such a weight reaches its MatMul through a Reshape (`dq_float`), which onnxruntime's fusion into
# MatMulNBits does not match: the MatMul computes in float, not with the fused kernel's int8
# activations (issue 55; measured below the lowering's docstring and in docs/quantization.md).
FLOAT_KEPT = ("kept quantized in memory (DequantizeLinear, then a Reshape that onnxruntime does not fuse: it computes "
              "the MatMul in float, where fused into MatMulNBits it would quantize the activations to int8): the lean "
              "forms alone would hold more than the float model at load")
# ... and where onnxruntime would not fuse it anyway (running/nbits_fusion.py: a Relu after it)
FLOAT_UNFUSED = ("kept quantized in memory (DequantizeLinear, run at each inference: the MatMul computes in float; "
                 "{why}): the lean forms alone would hold more than the float model at load")


def at_load(candidates: list[Candidate], graph: gs.Graph, options: QuantOptions, opset: int,
            facts: ModelFacts) -> tuple[list[Candidate], float | None]:
    """The candidates with those kept quantized in memory lowered as `dq`, and the cap on what
    the accurate chain spends at load (None: its share alone). The same wherever the weights
    are stored (load_memory.py)."""
    sites = collect_constants(graph, list(iter_scopes(graph)))
    if options.target != "tensorrt" and opset >= KEPT_OPSET and not float_weights_fit(sites, options.memory):
        return _keep_to_fit(candidates, sites, options.memory), None
    if memory_rule_applies(graph, options) and opset >= KEPT_OPSET:
        return _keep_in_memory(candidates, opset), None
    if options.lean_default and facts.kv_cache:  # nothing kept in memory to pay for the chain:
        # it spends only what the plan saves at load (SmolLM2-135M's optimum export, int8: 1.18x ->
        # 1.04x the float model's memory, top-1 97.1% -> 98.5% on held-out prompts)
        return candidates, room_at_load(planned_forms(candidates))
    return candidates, None


def planned_forms(candidates: list[Candidate]) -> list:
    """Each candidate's weight with its lowering, `cast` for float16, a `lean` one's lean form
    (rules.lean_forms): what load_memory estimates."""
    return lean_forms((c.site, "cast" if c.float16 else c.lowering) for c in candidates)


def _keep_in_memory(candidates: list[Candidate], opset: int) -> list[Candidate]:
    """The MatMul (and Conv) weights that load_memory keeps quantized in memory lowered as `dq`;
    a lean Gemm's B read with transB among them where the int8 default once stored it transposed
    in blocks for MatMulNBits (int4_paths.transposed_gemm_fuses, with the blocks it is grouped in)."""
    gemms = {c.name for c in candidates if c.lowering == "lean" and not c.float16 and c.scheme is not None
             and transposed_gemm(c.site) and _stored_transposed(c)}
    planned = planned_forms(candidates)
    kept = {site.name for site in kept_in_memory(planned, left_lean=small_weight,
                                                 gemm_kept=lambda site: site.name in gemms)}
    kept |= {site.name for site in float16_kept(planned, left_lean=small_weight)}  # storage12
    return [_kept(c, opset) if c.name in kept else c for c in candidates]


def _stored_transposed(c: Candidate) -> bool:
    """int4_paths.transposed_gemm_fuses; for a 16-bit weight read through Casts to float32, the
    same test on the Gemm behind them (issue 55: oww_hey_jarvis' bf16 first layer was left lean,
    0.0199 relative L2 against the float32 model's 0.0110)."""
    behind = through_casts(c.site)
    if behind is None:
        return transposed_gemm_fuses(c.site, c.scheme)
    return c.scheme.granularity == "block" and unfused_reason(c.site, c.scheme, behind) is None


def _kept(c: Candidate, opset: int) -> Candidate:
    """`c` kept quantized in memory: DequantizeLinear per output channel; a MatMul weight with the
    lean form's input rows equalized (`dq_equalized`, EQUALIZED_KEPT)."""
    scheme = kept_scheme(c.site)
    if matmul_weight(c.site) and REGISTRY["dq_float"].fits(c.site, scheme, "int8", opset) is None:
        kept = FLOAT_KEPT if fuses_into_nbits(c.site) else FLOAT_UNFUSED.format(why=unfused_after(
            c.site, effective_readers(c.site)[0][0]))
        return dataclasses.replace(c, scheme=scheme, lowering="dq_float", reason=kept + EQUALIZED_KEPT)
    if matmul_weight(c.site) and REGISTRY["dq_equalized"].fits(c.site, scheme, "int8", opset) is None:
        return dataclasses.replace(c, scheme=scheme, lowering="dq_equalized",
                                   reason=kept_reason(c.site) + EQUALIZED_KEPT)
    if reads_normalized(c.site) and REGISTRY["dq_equalized"].fits(c.site, scheme, "int8", opset) is None:
        return dataclasses.replace(c, scheme=scheme, lowering="dq_equalized",
                                   reason=kept_reason(c.site) + EQUALIZED_KEPT + NORMALIZED_KEPT)
    return dataclasses.replace(c, scheme=scheme, lowering="dq", reason=kept_reason(c.site))


def _keep_to_fit(candidates: list[Candidate], sites, memory: int | None) -> list[Candidate]:
    """Every float32 weight (load_memory.as_float32: a bfloat16 one behind Casts to float32 too)
    planned in a form that turns float at load (lean, scaled, arith) lowered as `dq` per channel
    instead: the float weights would not fit where the model runs
    (load_memory.float_weights_fit). Weights the plan stores as float16 (small ones) keep their
    Cast: they are a small share of such a model."""
    from ...report import human_bytes

    size = human_bytes(sum(held_bytes(site) for site in sites if site.onnx_dtype in FLOAT_TYPES))
    where = human_bytes(machine_memory() if memory is None else memory)
    kept = []
    for c in candidates:
        if c.lowering in ("lean", "scaled", "arith") and not c.options.four_bit and as_float32(c.site):
            reason = FIT_REASON.format(how=FIT_HOW[fuses_into_nbits(c.site)], size=size, memory=where)
            c = dataclasses.replace(c, scheme=kept_scheme(c.site), lowering="dq", float16=False, why=reason,
                                    reason=reason)
        kept.append(c)
    return kept
