"""The third stage: which lowering turns each weight back into float (`lowering_for`), and its lean
form where the int8 default leaves lean or accurate to the measured choice (`lean_scheme`,
lean.py). What the API asks before planning (the opset those choices need, whether the options
change any weight at all) is the planning run's (planning.py), from these answers. Rules of
thumb live here, each with the measurement behind it (plans' whys cite rules.decoder_nbits)."""

from __future__ import annotations

import dataclasses

from ...graph_utils import ConstantSite
from ..lowerings import REGISTRY
from ..lowerings.tied import scheme_for as tied_scheme
from ..options import QuantOptions, Scheme, dq_min_opset
from .int4_paths import runs_matmulnbits, transposed_gemm_fuses
from .load_memory import TRANSPOSED_GEMM_OPSET, fused_gemm, moved_as_constant
from .candidate import Candidate, PlanContext
from .model_facts import ModelFacts
from .weights import float16_for_tensorrt

# A Gemm's B read with transB (a classifier head) in int8 blocks, stored transposed, which
# onnxruntime fuses into MatMulNBits (lowerings/dq_transposed.py): blocks need opset 21. ddddocr's
# 8210x1024 classifier: memory 0.71x the float model's and latency 0.87x, against one float copy
# at load and a full-width Gemm for the lean form. Only a large one (load_memory.fused_gemm): the
# fused kernel's int8 activations cost a small one accuracy the memory did not need
# (oww_hey_jarvis, four such Gemms: 0.055 relative L2 on speech against 0.011 lean or kept as
# DequantizeLinear before the Gemm, load_memory.transposed_gemm; issue 55).


def lower(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """Stage 4: each weight's lowering at the run's opset (`lowering_for`), and whether it is the
    KV-cache decoder's 8-bit MatMulNBits (`decoder_nbits`, which records.py words and
    symmetry.py leaves alone). The plan's figures of the forms chosen so far go in ctx.details."""
    lowered = []
    for c in candidates:
        lowering = ctx.planning.lowering(c.site, c.options, c.scheme, ctx.opset)
        nbits = lowering == "matmulnbits" and not c.options.four_bit and decoder_nbits(c.site, c.options, ctx.facts)
        lowered.append(dataclasses.replace(c, lowering=lowering, decoder_nbits=nbits))
    ctx.details.update({
        # blocks asked for, no block size near it divides the axis
        "per_channel_instead_of_blocks": [c.name for c in lowered if c.scheme.granularity != c.options.granularity
                                          and c.lowering != "lean"],
        "float16_for_tensorrt": {c.name: c.why for c in lowered if float16_for_tensorrt(c.site, c.options)}})
    return lowered


def lowering_for(site: ConstantSite, options: QuantOptions, scheme: Scheme, opset: int, facts: ModelFacts) -> str:
    """`auto`: integers gathered before dequantizing for embedding tables; for a model only
    onnxruntime runs (--target onnxruntime, or com.microsoft ops already:
    int4_paths.runs_matmulnbits) MatMulNBits for a 4-bit MatMul weight, and for a tied token
    table MatMulNBits with GatherBlockQuantized on the one table, 4-bit or the default int8;
    DequantizeLinear when the weights are to stay quantized in memory; the lean `scaled` lowering
    (int8, the scheme left to us) where every reader can take the scale after it; the `arith`
    chain elsewhere."""
    if options.lowering != "auto":
        return options.lowering
    if REGISTRY["gather"].fits(site, scheme, options.dtype, opset) is None:
        return "gather"
    # a table looked up by EmbedLayerNormalization or by Gather through a Cast, kept quantized
    # (choices/fused_forms.py; the default reaches it through lean_scheme)
    if not options.lean_default and REGISTRY["embed_rows"].fits(site, scheme, options.dtype, opset) is None:
        return "embed_rows"
    # 4-bit, and the int8 default's weights in a KV-cache decoder (decoder_nbits); a plan or
    # lowering="matmulnbits" asks for it anywhere
    if (options.four_bit or decoder_nbits(site, options, facts)) and runs_matmulnbits(site, options, facts) and \
            REGISTRY["matmulnbits"].fits(site, scheme, options.dtype, opset) is None:
        return "matmulnbits"
    # a tied token table read in their kernels by both ops (lowerings/tied_nbits.py), where only
    # onnxruntime runs the model: 4-bit, or 8-bit for the default int8 (SmolLM2-135M's genai
    # export, int8: 0.72x the float model's memory against 0.95x with `tied`, decode and logits' error alike)
    if (options.four_bit or options.lean_default) and runs_matmulnbits(site, options, facts) and \
            REGISTRY["tied_nbits"].fits(site, scheme, options.dtype, opset) is None:
        return "tied_nbits"
    if options.four_bit and not options.keep_quantized and \
            REGISTRY["tied"].fits(site, tied_scheme(site), "int8", opset) is None:
        # a token table that is also the lm_head, kept 4-bit, was dequantized and transposed whole
        # at every decoding step (SmolLM2-135M: decode 5.1x the float model's); in 8 bits its rows
        # are gathered and the lm_head reads it as the float model does
        return "tied"
    # a weight only moved by its reader (a position table reshaped for a Resize) is folded at load:
    # behind a DequantizeLinear its constant chain would run at each inference (load_memory.MOVES_DATA)
    if options.stays_quantized and opset >= dq_min_opset(options) and not moved_as_constant(site):
        return "dq"
    if options.lean_default and opset >= TRANSPOSED_GEMM_OPSET and fused_gemm(site) and \
            transposed_gemm_fuses(site, scheme):
        return "dq_transposed"  # a large classifier head, fused (the comment above)
    if options.lean_default and REGISTRY["tied"].fits(site, tied_scheme(site), "int8", opset) is None:
        return "tied"  # a token table that is also the lm_head (lowerings/tied.py)
    if options.lean_default:
        return "lean"  # or the accurate chain, measured per weight in choices.lean.choose_lean
    return "arith"


def decoder_nbits(site: ConstantSite, options: QuantOptions, facts: ModelFacts) -> bool:
    """Whether the int8 default writes `site` as 8-bit MatMulNBits (symmetric blocks along K,
    accuracy_level 4: the activations quantized to int8 per block in the kernel), where it fits:
    in a decoder with a KV cache that only onnxruntime runs (int4_paths.runs_matmulnbits).

    SmolLM2-135M's genai export against the lean per-channel form, one run each (2026-11-27):
    memory after session creation 0.33x against 0.81x the float model's, decode 0.43x against
    0.91x, logits' rel L2 0.042 against 0.057, top-1 97.8% against 98.5% over 136 held-out
    positions, the float model's greedy text on 6 of 20 prompts either way. With zero points:
    top-1 95.6%, decode 0.49x. Its 8-bit float kernel (accuracy_level 0) is 11-13x slower than
    the float MatMul at one token, so that level is no option. Elsewhere the lean form stays:
    a standard-op model may run in onnxruntime-web, whose 8-bit MatMulNBits is slower than its
    float MatMul (bench/decoder_step.py: 8 layers of 576x1536 and back at one token in WASM, 20.4
    ms against 3.0 as the lean form and 2.6 in float; so not with --runtime onnxruntime-web
    either), and an encoder loses accuracy to the int8 activations (all-MiniLM-L6-v2 under
    --target onnxruntime, every MatMul weight so: rel L2 0.033 against 0.023 on real sentences,
    at 0.69x latency against 1.09x)."""
    return options.lean_default and options.runtime != "onnxruntime-web" and \
        runs_matmulnbits(site, options, facts) and facts.kv_cache
