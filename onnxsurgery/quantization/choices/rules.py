"""Per weight: whether to quantize it, how to group it (Scheme), how to round it and which
lowering turns it back into float (`lowering_for`). Rules of thumb live here, each with the
measurement behind it; the measured choice between lean and accurate is lean.py."""

from __future__ import annotations

import fnmatch

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, collect_constants, consumers, graph_outputs_holding, \
    iter_scopes, read_values
from ...kv_cache import has_kv_cache
from ..axes import choose_axes
from ..options import (FLOAT_TYPES, TENSORRT_BLOCK_SIZES, TENSORRT_INT4_READERS, TENSORRT_WEIGHT_READERS, QuantOptions,
                       Scheme, dq_min_opset)
from ..lowerings import REGISTRY
from ..lowerings.tied import scheme_for as tied_scheme
from ..lowerings.tied_nbits import hidden_axis as tied_hidden_axis
from ..lowerings.embed_rows import word_table
from .fused_forms import contrib_weight, fused_form, table_refusal
from ..lowerings.scaled import scale_axis
from .int4_paths import adapts, forget_model_facts, int4_form, model_fact, runs_matmulnbits, transposed_gemm_fuses
from .load_memory import KEPT_OPSET, applies as memory_rule_applies, kept_in_memory

# Recurrent ops multiply their weights by an internal state, so no scale can follow them, and
# Cast -> Mul folds two float copies at load (ddddocr: 1.09x the float model's memory). Their
# weights' lean form is per-channel DequantizeLinear (opset 13), which onnxruntime keeps: the
# integers stay in memory (ddddocr: 0.85x) and are dequantized at every inference. The cost is
# latency, mostly because the op can no longer pack its weights once at load (ddddocr: 1.15-1.24x;
# `--exclude LSTM` keeps them float instead).
RECURRENT_OPS = ("LSTM", "GRU", "RNN")
RECURRENT_DQ_OPSET = 13
# A Gemm's B read with transB (a classifier head) in int8 blocks, stored transposed, which
# onnxruntime fuses into MatMulNBits (lowerings/dq_transposed.py): blocks need opset 21. ddddocr's
# 8210x1024 classifier: memory 0.71x the float model's and latency 0.87x, against one float copy
# at load and a full-width Gemm for the lean form.
TRANSPOSED_GEMM_OPSET = 21


def required_opset(opts: QuantOptions, graph: gs.Graph | None = None, mapped: bool = False) -> int:
    """The opset the lowering asked for needs (the API upgrades a model below it): DequantizeLinear
    with blocks or 4-bit types needs 21; the default's lean form of recurrent weights (in `graph`)
    needs 13; every other lowering works from opset 7 (or 11). `mapped`: as plan_weights'."""
    forget_model_facts()  # of an earlier run on this graph
    if opts.fp16 or opts.levels:
        return 1
    if opts.int4_for:  # the weights allocated 4 bits need what 4-bit options need
        return max(required_opset(opts.as_four_bit(), graph, mapped),
                   required_opset(opts.changed(int4_for=()), graph, mapped))
    if opts.lowering == "dq" or (opts.lowering == "auto" and opts.stays_quantized):
        return dq_min_opset(opts)
    if graph is not None and opts.lean_default:
        weights = [site for site in collect_constants(graph, list(iter_scopes(graph)))
                   if site.num_elements >= opts.min_elements]
        if any(len(site.shape) == 2 and transposed_gemm_fuses(site, choose_scheme(site, opts)) for site in weights):
            return TRANSPOSED_GEMM_OPSET
        if any(recurrent_weight(site) for site in weights):
            return RECURRENT_DQ_OPSET
        planned = lean_forms((site, lowering_for(site, opts, choose_scheme(site, opts), KEPT_OPSET))
                             for site in weights if site.onnx_dtype in FLOAT_TYPES and site.shape)
        if memory_rule_applies(graph, opts) and kept_in_memory(planned, mapped=mapped):
            return KEPT_OPSET  # per-channel DequantizeLinear (load_memory.py)
    return 1


def recurrent_weight(site: ConstantSite) -> bool:
    """A float32 weight read only as W or R of LSTM/GRU/RNN (lean form: DequantizeLinear)."""
    readers = consumers(site)
    return (site.onnx_dtype == onnx.TensorProto.FLOAT and bool(readers)
            and all(n.op in RECURRENT_OPS and i in (1, 2) for n, i in readers))


def choose_scheme(site: ConstantSite, options: QuantOptions) -> Scheme:
    """The grouping asked for, fitted to the weight. Blocks must tile the blocked axis: when the
    block size does not divide it, the largest divisor between half the block size and the
    block size is used instead (200 input channels: blocks of 25 for 32), and when there is
    none (depthwise and 3-channel convolutions, odd widths), one scale per channel. For
    TensorRT, an axis no longer than the block size is one block: the same scales as per
    channel, in the blockwise form TensorRT documents for 4-bit weights. A 4-bit MatMul/Gemm
    weight takes the largest power of two among those divisors, where there is one."""
    channel_axis, block_axis = choose_axes(site)
    hidden = tied_hidden_axis(site)  # a tied token table: blocks along the hidden axis, which both
    if hidden is not None:  # its readers reduce over (mirrored, the readers disagree: MatMul B, Transpose)
        channel_axis, block_axis = 1 - hidden, hidden
    if options.granularity == "tensor":
        return Scheme("tensor")
    if options.granularity == "block":
        n = site.shape[block_axis]
        if options.target == "tensorrt":  # only the block sizes TensorRT takes (tensorrt_block_size)
            size = tensorrt_block_size(n, options.block_size)
            return Scheme("block", block_axis, size) if size else Scheme("channel", channel_axis)
        fitting = [b for b in range(options.block_size, (options.block_size - 1) // 2, -1) if n % b == 0]
        if options.four_bit and options.target != "tensorrt" and matmul_weight(site):
            # onnxruntime fuses 4-bit blocks of a power of two >= 16 into MatMulNBits (int4_paths.py):
            # K = 240 takes blocks of 16 rather than 30 (PP-OCRv4 rec's 240x120 weights)
            fitting = [b for b in fitting if b >= 16 and not b & (b - 1)] or fitting
        if fitting:
            return Scheme("block", block_axis, fitting[0])
    return Scheme("channel", channel_axis)


def tensorrt_block_size(n: int, asked: int) -> int | None:
    """The INT4 block size TensorRT takes for a blocked axis of `n`: the one asked for (64 or
    128), else 64 where 128 was asked and only 64 divides `n`; None where neither divides it
    (the weight then stays int8 per channel: site_options)."""
    return next((b for b in TENSORRT_BLOCK_SIZES if b <= asked and n % b == 0), None)


def tensorrt_int8_instead(site: ConstantSite, options: QuantOptions) -> QuantOptions | None:
    """Under --target tensorrt --dtype int4: int8 per channel (symmetric DequantizeLinear, which
    TensorRT takes for MatMul and Gemm too) for a 2-D MatMul/Gemm weight whose blocked axis no
    block size TensorRT takes divides (PP-OCRv4 rec's K = 240, 120); None elsewhere."""
    if options.target != "tensorrt" or not options.four_bit or options.granularity != "block" or \
            len(site.shape) != 2 or tensorrt_refusal(site, options):
        return None
    n = site.shape[choose_axes(site)[1]]
    if tensorrt_block_size(n, options.block_size) is not None:
        return None
    sizes = [b for b in TENSORRT_BLOCK_SIZES if b <= options.block_size]
    divides = f"neither {sizes[0]} nor {sizes[1]} divides" if len(sizes) > 1 else f"{sizes[0]} does not divide"
    return options.changed(dtype="int8", granularity="channel", int4_for=(),
                           reason=f"int8 per channel, not int4: TensorRT's INT4 blocks are 64 or 128, and {divides} "
                                  f"its blocked axis ({n})")


def tensorrt_int8_weight(site: ConstantSite, options: QuantOptions) -> bool:
    """Whether TensorRT reads `site` as a quantized weight (tensorrt_refusal), and it is a weight
    at all (not a quantized model's own data, not a position table)."""
    return not (tensorrt_refusal(site, options) or already_quantized(site) or position_table(site))


def matmul_weight(site: ConstantSite) -> bool:
    """A 2-D weight read only as B of MatMul or Gemm."""
    readers = consumers(site)
    return len(site.shape) == 2 and bool(readers) and all(n.op in ("MatMul", "Gemm") and i == 1 for n, i in readers)


def balanced_rounding(site: ConstantSite, options: QuantOptions) -> bool:
    """Whether `site` gets balanced rounding (module docstring: convolution weights under auto)."""
    if options.rounding != "auto":
        return options.rounding == "balanced"
    readers = consumers(site)
    return bool(readers) and all(n.op in ("Conv", "ConvTranspose") and i == 1 for n, i in readers)


def site_options(site: ConstantSite, options: QuantOptions, four_bit: QuantOptions | None = None) -> QuantOptions:
    """The options for `site`: `four_bit` (options.as_four_bit(), computed once by the caller)
    where the weight is in options.int4_for; int8 per channel for a 4-bit weight TensorRT cannot
    take in blocks (tensorrt_int8_instead); under --dtype int4 with the forms left to quant,
    int8 where onnxruntime has no fast 4-bit path for the weight's reader (int4_paths.py, with
    the reason in `reason`); else `options`."""
    if options.int4_for and matches(site, options.int4_for):
        chosen = four_bit or options.as_four_bit()
        return tensorrt_int8_instead(site, chosen) or chosen
    if (int8 := tensorrt_int8_instead(site, options)) is not None:
        return int8
    if options.target == "tensorrt":
        from .tensorrt_float16 import tensorrt_float16  # this target's only: imported where it applies

        if why := tensorrt_float16(site, options, tensorrt_int8_weight, balanced_rounding):
            return options.changed(fp16=True, reason=why)
        if options.dtype == "int8" and options.granularity == "channel" and options.lowering == "dq" and \
                REGISTRY["dq_equalized"].fits(site, Scheme("channel", choose_axes(site)[0]), "int8",
                                              dq_min_opset(options)) is None:
            return options.changed(lowering="dq_equalized")  # the default's equalization, as TensorRT takes it
    if (fused := fused_form(site, options)) is not None:  # com.microsoft readers, looked-up tables
        return fused
    if adapts(options) and site.shape:  # a scalar has no grouping (refusal says so)
        return int4_form(site, options, choose_scheme(site, options), recurrent_weight(site))
    return options


def matches(site: ConstantSite, patterns: tuple[str, ...]) -> bool:
    ops = {n.op for n, _ in consumers(site)}
    return any(fnmatch.fnmatchcase(site.name, p) or any(fnmatch.fnmatchcase(op, p) for op in ops)
               for p in patterns)



# onnxruntime's fused models (transformers optimizer): through the arith chain, contrib-op
# weights held two folded float copies at load, as recurrent ones do (all-MiniLM-L6-v2 fused:
# 1.40x the fused original's memory after session creation). FusedMatMul and Attention take a
# scale after or before them (`scaled`); any other com.microsoft reader gets DequantizeLinear per
# channel, which onnxruntime 1.32 keeps unfolded before contrib ops too (the integers stay; a
# dequantization at every run: measured on Attention, 1.68x latency, hence its scale before).
# EmbedLayerNormalization's tables, and what int4 and --keep-quantized store: fused_forms.py.


def lean_scheme(site: ConstantSite, opset: int) -> tuple[Scheme, str]:
    """The lean form of an int8 weight: one scale per output channel (symmetric), lowered as
    `scaled` where every reader can take the scale after it (FusedMatMul included), as
    DequantizeLinear for recurrent weights (RECURRENT_OPS above) and for weights of
    onnxruntime's contrib ops (`contrib_weight`), else as `arith` Cast -> Mul."""
    axis = scale_axis(site)
    if axis is not None:
        return Scheme("channel", axis), "scaled"
    if word_table(site):  # EmbedLayerNormalization: int8 rows gathered for its token ids
        return Scheme("channel", 0), "embed_rows"
    channel = Scheme("channel", choose_axes(site)[0])
    if (recurrent_weight(site) or contrib_weight(site)) and opset >= RECURRENT_DQ_OPSET:
        return channel, "dq"
    return channel, "arith"


def lean_forms(planned) -> list[tuple[ConstantSite, str]]:
    """Pairs of a weight and its planned lowering, with `lean` (lean form or accurate chain, not
    chosen yet) as the lean form's own lowering at load_memory.KEPT_OPSET (lean_scheme): what
    load_memory's estimate counts (a lean `arith` weight holds far more at load than a `scaled`
    one)."""
    return [(site, lean_scheme(site, KEPT_OPSET)[1] if lowering == "lean" else lowering) for site, lowering in planned]


def value_refusal(site: ConstantSite, float16_because: str | None = None) -> str | None:
    """Why the weight's values keep it as it is, read once: NaN or Inf, which no scale
    represents; for a weight to be stored as float16 (`float16_because`, the reason it would
    be), magnitudes float16 cannot hold."""
    values = read_values(site.tensor)
    if not np.isfinite(values).all():
        return "holds NaN or Inf values"
    if float16_because and np.abs(values).max() > np.finfo(np.float16).max:
        return f"{float16_because}; values beyond float16's range"
    return None



# Ops whose float constant inputs are a quantized model's own data (scales, zero points, lookup
# tables), not weights: quantizing a scale again breaks the model (a builder int4 export given to
# quant again: 151 *_scales tensors re-quantized, output rel L2 1.0).
QUANTIZED_READERS = ("DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulNBits",
                     "GatherBlockQuantized", "MatMulInteger", "ConvInteger", "MatMulIntegerToFloat",
                     "DynamicQuantizeMatMul", "QAttention", "QGemm", "QEmbedLayerNormalization")
# Rotary position tables (cos and sin per position and frequency) are read by these ops at these
# inputs; a graph that computes rotary embedding itself names them so. Position tables, not weights.
ROTARY_READERS = {"RotaryEmbedding": (2, 3), "GroupQueryAttention": (7, 8)}
ROTARY_NAMES = ("cos_cache", "sin_cache", "cos_cached", "sin_cached")


def already_quantized(site: ConstantSite) -> str | None:
    """Why `site` is a quantized model's own data rather than a weight (QUANTIZED_READERS)."""
    ops = sorted({n.op for n, _ in consumers(site) if n.op in QUANTIZED_READERS or n.op.startswith("QLinear")})
    return f"already quantized: read by {', '.join(ops)}" if ops else None


def position_table(site: ConstantSite) -> str | None:
    """Why `site` is a rotary position table (ROTARY_READERS, ROTARY_NAMES)."""
    if any(i in ROTARY_READERS.get(n.op, ()) for n, i in consumers(site)) or \
            any(part in site.name.lower() for part in ROTARY_NAMES):
        return "a rotary position table (cos/sin cache), not a weight"
    return None


def refusal(site: ConstantSite, scopes, options: QuantOptions, keep: frozenset[str],
            activations_quantized: bool = False) -> str | None:
    """Why `site` is left as it is under `options`, or None. `activations_quantized`: the model
    quantizes its activations (QuantizeLinear nodes, a QDQ model): its float weights are left
    alone unless --include names them, since weight rounding would stack on activation rounding."""
    reason = already_quantized(site) or position_table(site)
    if reason:
        return reason
    if site.num_elements < options.min_elements:
        return "small"
    if not site.shape:
        return "a scalar: nothing to group or gain"
    if options.fp16 and site.onnx_dtype != onnx.TensorProto.FLOAT:
        return "--fp16 applies to float32 weights only"
    if options.levels and site.onnx_dtype == onnx.TensorProto.BFLOAT16:
        return "--levels: bfloat16 weights are left alone"
    if options.include and not matches(site, options.include):
        return "not matched by --include"
    if options.exclude and matches(site, options.exclude):
        return "matched by --exclude"
    if not options.include and (table := table_refusal(site, options)):
        return table
    if activations_quantized and not options.include:
        return "the model quantizes its activations (QDQ): --include NAME quantizes this weight too"
    if site.name in keep:
        return "overridable graph input"
    if graph_outputs_holding(scopes, site.value):
        return "graph output"
    if not site.value.outputs:
        return "no consumer"
    float32 = site.onnx_dtype == onnx.TensorProto.FLOAT  # under tensorrt: float16 instead (float16_for_tensorrt)
    if options.target == "tensorrt" and not (options.fp16 or options.levels or float32):
        return tensorrt_refusal(site, options)
    return None


def any_weight_to_change(graph: gs.Graph, options: QuantOptions, keep: frozenset[str]) -> bool:
    """Whether `options` would change any weight of `graph` (a model whose weights are all
    quantized already, or all excluded, needs no opset upgrade: its rewrite alone moved an
    already-quantized MiniLM's batch-4 outputs by 8.4%)."""
    forget_model_facts()  # of an earlier run on this graph
    scopes = list(iter_scopes(graph))
    qdq = any(node.op == "QuantizeLinear" for scope in scopes for node in scope.graph.nodes)
    return any(refusal(site, scopes, site_options(site, options), keep, qdq) is None
               for site in collect_constants(graph, scopes) if site.onnx_dtype in FLOAT_TYPES)


def float16_for_tensorrt(site: ConstantSite, options: QuantOptions) -> str | None:
    """Why a float32 weight is stored as float16 (with a Cast back) under target tensorrt: it
    feeds a layer TensorRT takes no quantized weight for (an embedding table read by Gather, an
    LSTM's weights, a Conv weight at int4), and Cast from float16 is a type conversion
    TensorRT's parser takes everywhere. None for weights quantized as usual."""
    if options.target != "tensorrt" or options.fp16 or options.levels or site.onnx_dtype != onnx.TensorProto.FLOAT:
        return None
    return tensorrt_refusal(site, options)


def tensorrt_refusal(site: ConstantSite, options: QuantOptions) -> str | None:
    """Why a weight is not quantized under target tensorrt (float16_for_tensorrt): TensorRT fuses a weight's
    DequantizeLinear into Conv, ConvTranspose, MatMul and Gemm, and takes 4-bit weights for
    MatMul and Gemm only (blocks: 2-D)."""
    ops = {n.op for n, _ in consumers(site)}
    readers = TENSORRT_INT4_READERS if options.four_bit else TENSORRT_WEIGHT_READERS
    if not ops <= set(readers):
        return f"target tensorrt: read by {', '.join(sorted(ops - set(readers)))}; {options.dtype} weights " \
               f"only for {', '.join(readers)}"
    if any(index != 1 for _, index in consumers(site)):  # TensorRT fuses a DQ into the weight input only
        return "target tensorrt: read as a bias or data input; quantized weights only as the layer's weight input"
    if options.four_bit and len(site.shape) != 2:
        return f"target tensorrt: 4-bit weights must be 2-D; this one is {len(site.shape)}-D"
    return None


def decoder_nbits(site: ConstantSite, options: QuantOptions) -> bool:
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
    return options.lean_default and options.runtime != "onnxruntime-web" and runs_matmulnbits(site, options) \
        and model_fact(site, "kv_cache", has_kv_cache)


def lowering_for(site: ConstantSite, options: QuantOptions, scheme: Scheme, opset: int) -> str:
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
    if (options.four_bit or decoder_nbits(site, options)) and runs_matmulnbits(site, options) and \
            REGISTRY["matmulnbits"].fits(site, scheme, options.dtype, opset) is None:
        return "matmulnbits"
    # a tied token table read in their kernels by both ops (lowerings/tied_nbits.py), where only
    # onnxruntime runs the model: 4-bit, or 8-bit for the default int8 (SmolLM2-135M's genai
    # export, int8: 0.72x the float model's memory against 0.95x with `tied`, decode and logits' error alike)
    if (options.four_bit or options.lean_default) and runs_matmulnbits(site, options) and \
            REGISTRY["tied_nbits"].fits(site, scheme, options.dtype, opset) is None:
        return "tied_nbits"
    if options.four_bit and not options.keep_quantized and \
            REGISTRY["tied"].fits(site, tied_scheme(site), "int8", opset) is None:
        # a token table that is also the lm_head, kept 4-bit, was dequantized and transposed whole
        # at every decoding step (SmolLM2-135M: decode 5.1x the float model's); in 8 bits its rows
        # are gathered and the lm_head reads it as the float model does
        return "tied"
    if options.stays_quantized and opset >= dq_min_opset(options):
        return "dq"
    if options.lean_default and opset >= TRANSPOSED_GEMM_OPSET and transposed_gemm_fuses(site, scheme):
        return "dq_transposed"  # TRANSPOSED_GEMM_OPSET above
    if options.lean_default and REGISTRY["tied"].fits(site, tied_scheme(site), "int8", opset) is None:
        return "tied"  # a token table that is also the lm_head (lowerings/tied.py)
    if options.lean_default:
        return "lean"  # or the accurate chain, measured per weight in choices.lean.choose_lean
    return "arith"
