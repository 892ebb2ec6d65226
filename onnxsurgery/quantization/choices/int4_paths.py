"""Which 4-bit weights onnxruntime runs fast, and what `--dtype int4` stores the others as.

onnxruntime 1.32 (CPU; onnxruntime-web runs the same graph optimizers) fuses DequantizeLinear ->
MatMul into MatMulNBits, whose kernel keeps the weight 4-bit and runs about as fast as float
(all-MiniLM-L6-v2: 0.69x the float model's latency, 0.27x its memory). It fuses a
DequantizeLinear read by one MatMul, or by one Gemm without transA/transB, as B, in blocks along
K of a power of two >= 16 (checked on onnxruntime 1.32's optimized graphs). Every other 4-bit
DequantizeLinear runs at every inference (5-9 ns per element on the bench machine) and its
reader loses the weights it packs once at load (Conv: also the NCHWc layout). Measured on the
bench's models, `--dtype int4` against the float model (latency: median of interleaved runs on
two shared cores; memory: peak RSS growth over session creation):

- ALBERT-base, its 7 layer weights each read by the 12 MatMuls of its shared layers: 4.5x
  latency (the MatMuls take B unpacked: 455 -> 911 ms, plus the dequantization, every layer).
- ddddocr: 3.2x; its classifier (Gemm transB=1, 8210x1024) took 161 ms per inference to
  dequantize, 1.5x the float model's whole run (onnxruntime fuses no Gemm with transB); its
  LSTM weights 80 ms.
- PP-OCRv4 rec: 1.6-2.4x, mostly its convolutions (Conv 72 -> 126 ms) and MatMul weights with
  K = 120, 240, 360 (blocks of 30 or 24: not fused).

So, under `--dtype int4` with the forms left to quant (no --keep-quantized, which puts memory
first; no --granularity, --symmetric or --lowering; not for TensorRT), per weight:

- fused readers (above): 4-bit.
- Conv/ConvTranspose weights below SMALL_CONV_ELEMENTS: int8, scale after the convolution (one
  float copy at load). They run over the largest feature maps, where unpacked weights cost most,
  and hold few of the bytes: PP-OCRv4 rec 1.56x -> 1.15x latency at 0.60x memory (all its
  convolutions int8: 0.96x, 0.91x; below 150,000 elements: 1.12x, 0.64x).
- larger Conv weights: 4-bit, dequantized at every inference (the why says so): they are most of
  the bytes, read over small feature maps. Except in a model whose convolutions hold at most
  CONV_SHARE of its weights' bytes: all int8, whose float copies cost little memory (ddddocr,
  7%: 1.42x -> 1.12x latency, 0.81x -> 0.85x memory).
- recurrent weights: int8 per channel DequantizeLinear, the int8 default's form (integers in
  memory, dequantized at every inference). ddddocr, its classifier int8 too: 1.36x latency at
  0.82x memory; 4-bit: 2.0x; int8 Cast -> Mul folded into float at load: 1.22x latency but
  1.06-1.20x memory, more than the float model.
- a weight read by one Gemm with transB (a classifier head, most often): int8 blocks, stored
  transposed for a Gemm without transB, which onnxruntime fuses into MatMulNBits
  (lowerings/dq_transposed.py; ddddocr: 0.86x -> 0.50x memory, 1.20x -> 0.96-1.07x latency,
  rel L2 0.0144 -> 0.0145; at 4 bits its classifier alone went 0.0029 -> 0.042), in the blocks
  it was judged with (a power of two >= 16: int8's own, 28 for K = 336, fused nothing). In a
  model with HIDDEN_GEMMS or more such weights they are its hidden layers (torch writes every
  Linear so), which take 4 bits in the same transposed form, fused: minimol_fingerprint's 66,
  9.52 MB (int8's 8.71 MB) -> 6.75 MB, rel L2 on its molecules 0.0116 -> 0.104, 96% of the
  analogues retrieved; onnxruntime 1.32 fuses none whose Gemm it first fuses with a Relu after
  it (FusedGemm: tests/test_zoo_round18.py). Many that hold few of the bytes (HIDDEN_SHARE) are
  a network's conditioning layers: the int8 default's lean form, as it keeps every such weight
  under a million elements (load_memory.fused_gemm): terrain_diffusion's 58 timestep-embedding
  Gemms, fused, carried most of its int4 error through the kernel's int8 activations (0.162 ->
  0.0425 on its report set, height steps kept 77.5% -> 91.1%).
- biases and other 1-D weights: float16 (per channel, one scale per element outweighs the
  integers; in 4-bit blocks ddddocr's LSTM bias lost 8%).
- MatMul/Gemm weights onnxruntime does not fuse (several readers, blocks that are not a power
  of two, a MatMul read only by a Relu or Clip, or made a float Gemm with its [1, N] bias:
  running/nbits_fusion.py, the rule the report's label follows too; tf2onnx's Dense layers
  with a ReLU, tumor_vgg16 and capspot_siamese, whose 4-bit DequantizeLinear ran at every
  inference in float): int8, scale after the reader, float at load (the int8 default's form: ALBERT
  1.06x latency, but 0.98x memory: no standard-op form is both small and fast there). A
  DequantizeLinear per reader does not help: onnxruntime 1.32 fuses none whose integers another
  node also reads (tried: two MatMuls, each with its own DequantizeLinear of one initializer).
  A merged decoder's weights, read in both branches of its If, are such weights too. Under
  `--target onnxruntime` a weight read by several MatMuls stays 4-bit instead: one com.microsoft
  MatMulNBits per reader over one packed weight (lowerings/matmulnbits.py). Gemm weights with
  transB stay int8 there too: most are classifier heads, where 4 bits cost most (ddddocr's
  classifier as 4-bit MatMulNBits: 0.0144 -> 0.0368 on rendered text); a plan can still ask
  for it.

And the plan as a whole: where these forms leave the 4-bit weights under int4_saving.SAVING of the
int8 default's weight bytes, the plan is the int8 default's (int4_saving.py).
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, collect_constants, consumers, iter_scopes
from ..axes import choose_axes
from ..lowerings.dq_transposed import LOWERING as DQ_TRANSPOSED
from ..lowerings.matmulnbits import LOWERING as MATMULNBITS
from ..lowerings.weight_readers import effective_readers
from ..options import QuantOptions, Scheme
from .candidate import Form, form
from .fusion_after import unfused_after
from .model_facts import ModelFacts

SMALL_CONV_ELEMENTS = 65536  # PP-OCRv4 rec: 1.15x latency, 0.60x memory (module docstring)
# A model whose convolutions hold at most this share of its weights' bytes gets all of them int8
# (their float copies cost little memory): ddddocr, 7% (module docstring).
CONV_SHARE = 0.10
CONV_OPS = ("Conv", "ConvTranspose")
FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
# A model with at least this many weights read by Gemms with transB has them as its hidden layers
# (minimol_fingerprint: 85), which take 4 bits; fewer are heads kept int8 (the bench's and zoo's
# others: at most 4, silero's LSTM cells and oww_hey_jarvis' classifier).
HIDDEN_GEMMS = 8
# ... and they hold at least this share of its weights' bytes (minimol_fingerprint: 81, about 100%); fewer are
# a network's conditioning layers (terrain_diffusion's timestep embedding in each ResNet block: 58
# weights, 10%), which take the int8 default's form (module docstring)
HIDDEN_SHARE = 0.5
BIAS_INPUTS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2, "LSTM": 3, "GRU": 3, "RNN": 3}  # op -> its bias input


def adapts(options: QuantOptions) -> bool:
    """Whether quant picks each 4-bit weight's form by reader (module docstring): --dtype int4
    or uint4 with grouping, symmetry and lowering left to it, for onnxruntime or any runtime."""
    return (options.four_bit and not options.keep_quantized and options.target != "tensorrt"
            and options.lowering == "auto" and options.auto_scheme and options.auto_symmetric)


def unfused_reason(site: ConstantSite, scheme: Scheme, readers: list | None = None) -> str | None:
    """Why onnxruntime does not fuse `site`'s 4-bit DequantizeLinear (grouped as `scheme`) into
    MatMulNBits, None where it does (one MatMul, or one Gemm without transA/transB, reads it as
    B, in blocks along K of a power of two >= 16). `readers`: those to judge instead of its
    effective readers (a 16-bit weight's: the layers behind its Casts)."""
    readers = effective_readers(site) if readers is None else readers
    ops = sorted({n.op for n, _ in readers})
    if len(readers) > 1:
        return f"read by {len(readers)} {'/'.join(ops)} nodes: onnxruntime fuses a 4-bit weight into " \
               "MatMulNBits only for one reader, and dequantizes it at every inference"
    (node, index), = readers
    if index != 1 or len(site.shape) != 2:
        return f"read by {node.op} as input {index}: no 4-bit MatMulNBits path"
    if node.op == "Gemm" and node.attrs.get("transA", 0):
        return "read by Gemm with transA: onnxruntime does not fuse it into MatMulNBits and " \
               "dequantizes it at every inference"
    block = scheme.block_size or 0
    if scheme.granularity != "block" or block < 16 or block & (block - 1):
        k = site.shape[choose_axes(site)[1]]
        return f"K = {k}: no block of a power of two >= 16 tiles it, so onnxruntime does not fuse it " \
               "into MatMulNBits and dequantizes it at every inference"
    return None


def transposed_gemm_fuses(site: ConstantSite, scheme: Scheme) -> bool:
    """Whether `site` (grouped as `scheme`) is B of one Gemm with transB=1 that onnxruntime fuses
    into MatMulNBits once the weight is stored transposed (lowerings/dq_transposed.py)."""
    return (len(consumers(site)) == 1 and site.onnx_dtype == onnx.TensorProto.FLOAT
            and DQ_TRANSPOSED.fits(site, scheme, "int8", 21) is None and unfused_reason(site, scheme) is None)


def int4_form(site: ConstantSite, options: QuantOptions, scheme: Scheme, recurrent: bool,
              facts: ModelFacts) -> Form:
    """`options` (4-bit, `adapts`) for a weight onnxruntime runs fast at 4 bits, else the form
    the module docstring gives its reader, with its reason (said in the plan).
    `scheme`: the weight's grouping under `options` (forms.choose_scheme); `recurrent`: read only
    as an LSTM/GRU/RNN weight (weights.recurrent_weight); `facts`: the model's (model_facts.py).
    A 16-bit weight read through Casts to float32 is judged by the readers behind them, as its
    float32 twin is by its own (it was judged by the Cast)."""
    readers = effective_readers(site)
    ops = {n.op for n, _ in readers}
    if not readers:
        return Form(options)
    # a 16-bit weight's fp16 form is leaving it in its 16 bits (records.float16_record)
    if site.onnx_dtype in FLOAT_TYPES and (len(site.shape) == 1 or all(
            i == BIAS_INPUTS.get(n.op) for n, i in readers)):
        # per channel a 1-D weight's scales alone take as many bytes as float32; in blocks a bias is
        # added unscaled (ddddocr's LSTM bias: 8% weight error in 4-bit blocks). dtype: what --fp16 takes
        return form(options, "float16, not 4-bit: a bias or 1-D weight has no channels to share a scale, and "
                             "float16 costs little", fp16=True, dtype="int8")
    eight_bit = "uint8" if options.dtype.startswith("u") else "int8"
    lean = f"{eight_bit}, one scale per output channel applied after the reader (float at load), not 4-bit"
    if ops <= set(CONV_OPS) and all(i == 1 for _, i in readers):
        op = "/".join(sorted(ops))
        share = conv_share(options.min_elements, facts)
        if share <= CONV_SHARE:
            return form(options, dtype=eight_bit, lowering="scaled", reason=(
                f"{lean}: onnxruntime has no 4-bit {op}; a 4-bit weight is dequantized at every inference and "
                f"the {op} loses its packed weights, and the model's convolutions hold {share:.0%} of its "
                "weights: their float copies cost little memory"))
        if site.num_elements < SMALL_CONV_ELEMENTS:
            return form(options, dtype=eight_bit, lowering="scaled", reason=(
                f"{lean}: onnxruntime has no 4-bit {op}; a 4-bit weight is dequantized at every inference and "
                f"the {op} loses its packed weights, which costs most in the early, small layers"))
        return form(options, f"4-bit DequantizeLinear, dequantized at every inference (onnxruntime has no 4-bit "
                             f"{op}): {site.num_elements} elements, kept small in memory")
    if recurrent:
        return form(options, dtype=eight_bit, lowering="dq", granularity="channel", reason=(
            f"{eight_bit} per channel DequantizeLinear, not 4-bit: {'/'.join(sorted(ops))} has no quantized "
            "kernel, and 4-bit blocks take longest to dequantize at every inference; folded into float at "
            "load it held more memory than the float model"))
    if ops <= {"MatMul", "Gemm"} and all(i == 1 for _, i in readers):
        why = unfused_reason(site, scheme)
        if why is None and ops == {"MatMul"}:  # what follows it: a Relu awaiting its QuantizeLinear (fusion_after.py)
            why = unfused_after(site, readers[0][0])
        if transposed_gemm_fuses(site, scheme):
            gemms, share = transposed_gemms(options.min_elements, facts)
            if gemms >= HIDDEN_GEMMS and share >= HIDDEN_SHARE:
                return form(options, lowering="dq_transposed", reason=(
                    "4-bit blocks in a DequantizeLinear, stored transposed so that onnxruntime fuses it with the "
                    f"Gemm into MatMulNBits: the model's {gemms} Gemms with transB are its hidden layers "
                    f"({share:.0%} of its weights), not a classifier head"))
            if gemms >= HIDDEN_GEMMS:
                return form(options, dtype=eight_bit, lowering="scaled", reason=(
                    f"{lean}: one of the model's {gemms} Gemms with transB, which hold {share:.0%} of its weights "
                    "(a network's conditioning layers): 4 bits save little there, and the fused MatMulNBits' int8 "
                    "activations cost accuracy (the int8 default fuses only those over a million elements)"))
            # lowered in the blocks it was judged with (a power of two >= 16), which onnxruntime fuses:
            # int8's own (28 for K = 336) fused nothing (minimol_fingerprint: 60 DequantizeLinear left)
            return form(options, dtype=eight_bit, lowering="dq_transposed", granularity="block",
                        block_size=scheme.block_size, reason=(
                            f"{eight_bit} blocks in a DequantizeLinear, stored transposed so that onnxruntime fuses "
                            "it with the Gemm into MatMulNBits (integers stay in memory), not 4-bit: a Gemm with "
                            "transB is most often a classifier head, where 4 bits cost most"))
        # MatMul readers only: a Gemm is most often a classifier head, where 4 bits cost most (with
        # MatMulNBits: ddddocr's 8210x1024 classifier 0.0144 -> 0.0368 on rendered text, ALBERT's
        # pooler 0.29 -> 0.43 on generated ids); a plan record with lowering matmulnbits still takes it
        nbits = ops == {"MatMul"} and MATMULNBITS.fits(site, scheme, options.dtype, 0) is None
        if why and nbits and runs_matmulnbits(site, options, facts):
            return form(options, reason=f"{matmulnbits_because(options)}: 4-bit MatMulNBits" + (
                f", one per reader over one packed weight ({len(readers)} readers)" if len(readers) > 1 else ""))
        if why:
            return form(options, dtype=eight_bit, lowering="scaled", reason=f"{lean}: {why}" + (
                "; --target onnxruntime keeps it 4-bit (one com.microsoft MatMulNBits per reader)" if nbits else ""))
    return Form(options)


def transposed_gemms(min_elements: int, facts: ModelFacts) -> tuple[int, float]:
    """How many of the model's 2-D weights (of `min_elements` or more) one Gemm with transB=1
    reads as B (torch's Linear), and the share of its weights' bytes they hold: a classifier head
    is one or a few, a network written with Linear layers has one a layer."""
    def count(graph: gs.Graph) -> tuple[int, float]:
        sites = [s for s in collect_constants(graph, list(iter_scopes(graph))) if s.num_elements >= min_elements]
        gemm = [s.nbytes for s in sites if len(s.shape) == 2 and len(r := consumers(s)) == 1 and
                r[0][0].op == "Gemm" and r[0][1] == 1 and bool(r[0][0].attrs.get("transB", 0))]
        total = sum(s.nbytes for s in sites)
        return len(gemm), (sum(gemm) / total if total else 0.0)
    return facts.get(f"transposed_gemms {min_elements}", count)


def onnxruntime_only(facts: ModelFacts) -> bool:
    """Whether the model already holds com.microsoft ops (onnxruntime-genai's builder export:
    GroupQueryAttention, SkipSimplifiedLayerNormalization), so that only onnxruntime runs it."""
    return facts.get("onnxruntime_only", lambda graph: any(
        node.domain == "com.microsoft" for s in iter_scopes(graph) for node in s.graph.nodes))


def runs_matmulnbits(site: ConstantSite, options: QuantOptions, facts: ModelFacts) -> bool:
    """Whether 4-bit MatMul weights are written as com.microsoft MatMulNBits rather than as a
    DequantizeLinear onnxruntime fuses into one: under --target onnxruntime, and under the default
    target in a model that only onnxruntime runs already (`onnxruntime_only`). There the fusion
    at load costs memory the written op does not: SmolLM2-135M's genai export, --dtype int4,
    0.26x the float model's memory after session creation as DequantizeLinear against 0.22x as
    MatMulNBits (the builder's own int4 export: 0.21x), decode alike (two runs: 12.7 against
    15.4 ms, 20.5 against 14.1)."""
    return options.target == "onnxruntime" or (options.target == "any" and onnxruntime_only(facts))


def matmulnbits_because(options: QuantOptions) -> str:
    """Why `runs_matmulnbits` holds, for the plan's `why`."""
    return "--target onnxruntime" if options.target == "onnxruntime" else "the model already has com.microsoft ops"


def conv_share(min_elements: int, facts: ModelFacts) -> float:
    """The share of the bytes of the model's weights (constants of `min_elements` or more, the
    whole model's) that Conv/ConvTranspose weights hold."""
    def share(graph: gs.Graph) -> float:
        sizes = [(s.nbytes, bool(r := effective_readers(s)) and all(n.op in CONV_OPS for n, _ in r))
                 for s in collect_constants(graph, list(iter_scopes(graph))) if s.num_elements >= min_elements]
        total = sum(n for n, _ in sizes)
        return sum(n for n, conv in sizes if conv) / total if total else 0.0
    return facts.get(f"conv_share {min_elements}", share)
