"""The `scaled` lowering: a weight quantized per output channel, whose scale (and zero point)
is applied after the op that reads it instead of to the weight.

Before: W (float32) -> MatMul / Gemm / Conv -> Y
After:  Wq (int8) -> Cast -> MatMul / Gemm / Conv -> Y' -> Mul(scale per output channel) -> Y
        (Conv bias and Gemm C are divided by the scale, so that they come out right after it)

Why: a per-output-channel scale commutes with the contraction (X @ (q * s) = (X @ q) * s), so
the only weight-sized step onnxruntime folds at session creation is the Cast. Folding holds
every intermediate of a chain until it ends: the `arith` chain Cast -> Sub -> Mul -> Reshape
keeps four float copies of each weight alive at once, this one keeps one, the same as the
float original; the int8 file is a quarter of the size. Cost at run time: one elementwise Mul
on each reader's output (measured on MiniLM: latency 1.0x the original's).

Input-side equalization: per-output-channel scales waste resolution on weights whose input
rows differ in range (outlier rows: a few rows set every column's scale). So the weight is first
divided by r_k = (max |W_k,:|) ** EQUALIZE_ALPHA along its input axis, and the reader's data
input is multiplied by r instead (X @ W = (X * r) @ (W / r)): a Mul of the activation by a
vector at every inference (latency within the bench's noise), no weight-sized copy, so still one
float copy at load. Measured with every weight lean (worst
relative L2 over the bench's task inputs): MiniLM 0.032 -> 0.022, ddddocr's convolutions
0.029 -> 0.018, ALBERT-base 0.038 -> 0.033; alpha 0.25 and 0.75 were worse on MiniLM.
Not applied to grouped convolutions (r would be the output scale again), to Gemm with transA,
or under calibration (GPTQ rounds against the weight as it is).

Zero points: with W = s * (q - z) per output channel, X @ W = s * (X @ q - sum(X) * z), where
sum(X) adds up what each output element reads: a ReduceSum of the data input over its
contracted axis (MatMul, Gemm), or over the channels and then a window of ones with the Conv's
own strides, pads and dilations (one-group Conv). Still one float copy at load; at run time a
ReduceSum, a Mul and a Sub per reader. A symmetric range wastes levels on a lopsided channel;
zero points use all 256 over [min, max] (zero_points.py: where auto uses them).

Scale before: onnxruntime's fused Attention (com.microsoft) reads a packed QKV weight and
exposes no output a scale could follow, so its weight is quantized per input row instead and the
row scales multiply the data input: X @ (q * s) = (X * s) @ q, still one folded Cast at load and
a Mul of the activation at run time. Measured on all-MiniLM-L6-v2 fused by onnxruntime's
transformer optimizer (6 Attention weights 384x1152): DequantizeLinear before Attention kept
the integers but ran 1.68x the fused original's latency (dequantized at every run, no prepacked
weight); the arith chain held 1.40x its memory (with the rest of the model). Per-row scales
lose some accuracy against per-column ones (weight error 0.009-0.011 against 0.008).

float16 arithmetic: a reader that computes in float16 would see the integers themselves, so its
output before the scale (and a bias divided by the scale) is 1/scale times the real one: on a
float16 segmentation net (isnet, 1024x1024) a Conv's bias over its scale passed 65504, every
output NaN (issue 59). So a float16 weight read by MatMul, Gemm or Conv in float16 is not
`scaled` (the planner picks another form); through a Cast to float32 it is, and a float16
table's Gather (integers up to 127, then the scale) is too.

Limits: float32 and float16 weights (float16: scales in float16, no zero points); every reader
must be MatMul input B (2-D), Gemm input B, Conv input W, com.microsoft FusedMatMul input B
(2-D; what onnxruntime's optimizer makes of MatMul with a Transpose or a Mul) or Attention's
weight (scale before); one scale per channel, which is less accurate than blocks on weights
with outlier values within a row (the quantize pass measures that and spends a memory budget on `arith` there).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, read_values
from ..nodes import Emitter
from ..options import Scheme
from ..chunked import abs_max
from ..rounding import Quantized
from .base import Lowering
from .conv_zero_point import conv_zero_point
from .weight_readers import effective_readers, effective_readers_by_graph, through_casts

EQUALIZE_ALPHA = 0.5



def output_channel_axis(node: gs.Node, rank: int) -> int | None:
    """The axis of the weight (input 1) that becomes the reader's output channel, or None when
    the reader is not one whose output a per-channel scale can follow."""
    if node.op == "MatMul" and rank >= 2:  # a batched B ([members, K, N]: tglf's ensembles) too
        return rank - 1
    if node.op == "Gemm" and rank == 2:
        return 0 if node.attrs.get("transB", 0) else 1
    if node.op == "Conv" and rank >= 3:
        return 0
    if fused_matmul_b(node, rank):
        return 0 if node.attrs.get("transB", 0) else 1
    if node.op == "Gather" and rank == 2 and node.attrs.get("axis", 0) % 2 == 0:
        return 1  # rows gathered: Gather(q * s_columns) = Gather(q) * s_columns (comment below)
    return None


# An embedding table the `gather` lowering cannot take (a bfloat16 table read through a Cast to
# float32: a bfloat16 checkpoint's export) gets one scale per column, applied after the Gather:
# through the arith chain, all-MiniLM-L6-v2 with bfloat16 weights held 1.64x its original's
# memory after session creation (int8, bfloat16 and float32 copies of the 30522x384 word table
# at once). Per-column scales are less accurate than the gather lowering's per-row ones (weight
# error 0.011 against 0.007 on that table), and the table is one float copy, not int8 rows.


def input_row_axis(node: gs.Node, rank: int) -> int | None:
    """The weight's axis whose per-channel scale moves onto the reader's data input instead
    (X @ (q * s_rows) = (X * s) @ q), for readers no scale can follow: com.microsoft Attention's
    packed QKV weight [hidden, 3 * hidden] (module docstring). None for other readers."""
    if node.op == "Attention" and node.domain == "com.microsoft" and rank == 2:
        return 0
    return None


def scales_before(node: gs.Node, rank: int, axis: int) -> bool:
    """Whether `node` takes the weight's scale along `axis` on its data input (input_row_axis)
    rather than after itself (output_channel_axis)."""
    return output_channel_axis(node, rank) != axis and input_row_axis(node, rank) == axis


def scaled_before(site: ConstantSite, axis: int | None) -> bool:
    """Whether the `scaled` lowering with scales along `axis` puts them on the data input of
    `site`'s readers (Attention) rather than after them."""
    return axis is not None and any(scales_before(node, len(site.shape), axis) for node, _ in effective_readers(site))


def fused_matmul_b(node: gs.Node, rank: int) -> bool:
    """com.microsoft FusedMatMul (onnxruntime's fused models: alpha * op(A) @ op(B)) reading a
    2-D B: a MatMul whose B may be transposed; alpha commutes with the scale after it."""
    return node.op == "FusedMatMul" and node.domain == "com.microsoft" and rank == 2 \
        and not node.attrs.get("transBatchB", 0)


# The float types the lowering computes in: the reader's own (Cast int8 -> it, scales in it).
# bfloat16 is left to the arith chain: onnxruntime's CPU MatMul and Conv take no bfloat16.
SCALED_TYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16}


def scale_axis(site: ConstantSite) -> int | None:
    """The weight's output-channel axis if every reader can take its scale after it, or its
    input-row axis if every reader takes it on its data input instead (input_row_axis), else None."""
    if site.onnx_dtype not in SCALED_TYPES and through_casts(site) is None:
        return None
    readers = effective_readers(site)
    if computes_in_float16(site) and any(node.op != "Gather" for node, _ in readers):
        return None  # the unscaled output would overflow float16 (module docstring)
    return output_axis_ignoring_float16(site)


def output_axis_ignoring_float16(site: ConstantSite) -> int | None:
    """scale_axis without its float16 refusal: where every reader could take the scale after
    (or before) it, were it computed in float32 (arith_equalized.py folds the scale at load instead)."""
    readers = effective_readers(site)
    if not readers:
        return None
    rank = len(site.shape)
    places = set()
    for node, index in readers:
        if index != (0 if node.op == "Gather" else 1) or (len(node.inputs) > 2 and node.inputs[2] is site.value):
            return None
        after = output_channel_axis(node, rank)
        if after is not None and len(node.outputs) == 1:
            places.add((after, "after"))
        elif input_row_axis(node, rank) is not None and index == 1 and node.inputs[0] is not site.value:
            places.add((input_row_axis(node, rank), "before"))
        else:
            return None
    return places.pop()[0] if len(places) == 1 else None


def computes_in_float16(site: ConstantSite) -> bool:
    """Whether `site`'s readers multiply it in float16: a float16 weight not read through Casts
    to float32."""
    return site.onnx_dtype == onnx.TensorProto.FLOAT16 and through_casts(site) is None


def input_channel_axis(node: gs.Node, rank: int) -> int | None:
    """The weight's axis that meets the reader's data input (contracted with it), when an
    input-side scale can be applied to that input, else None."""
    if node.op == "MatMul" and rank >= 2:
        return rank - 2
    if node.op == "Gemm" and rank == 2 and not node.attrs.get("transA", 0):
        return 1 if node.attrs.get("transB", 0) else 0
    if node.op == "Conv" and rank >= 3 and node.attrs.get("group", 1) == 1:
        return 1
    if fused_matmul_b(node, rank) and not node.attrs.get("transA", 0) and not node.attrs.get("transBatchA", 0):
        return 1 if node.attrs.get("transB", 0) else 0
    return None


def equalized_axis(site: ConstantSite) -> int | None:
    """The weight's input axis if every reader can take an input-side scale along it, else None."""
    axes = {input_channel_axis(node, len(site.shape)) for node, _ in effective_readers(site)}
    return axes.pop() if len(axes) == 1 else None


def equalizing_scales(values: np.ndarray, site: ConstantSite) -> tuple[np.ndarray | None, int | None]:
    """(r, the input axis) the weight is divided by along that axis before quantizing (module
    docstring: input-side equalization), or (None, None) where some reader cannot take it."""
    axis = equalized_axis(site)
    if axis is None:
        return None, None
    return equalizing_from(abs_max(values, axis), site), axis  # np.abs(values).max(axis=others)


def equalizing_from(row_max: np.ndarray, site: ConstantSite) -> np.ndarray:
    """equalizing_scales' r from the weight's row maxima of |values| along its input axis."""
    r = row_max.astype(np.float64) ** EQUALIZE_ALPHA
    r = np.where((r > 0) & np.isfinite(r), r, 1.0).astype(SCALED_TYPES.get(site.onnx_dtype, np.float32))
    return r.astype(np.float32)  # a float16 weight's r is a float16 value: the graph multiplies by exactly that


def cast_weight(site: ConstantSite, stored: gs.Constant, names: NameAllocator, to: int) -> gs.Tensor:
    """The integers as the readers' float type `to`: a Cast, which onnxruntime folds at load."""
    weight = gs.Variable(names.new(f"{site.name}__cast"), dtype=SCALED_TYPES[to], shape=list(site.shape))
    site.scope.graph.nodes.append(gs.Node("Cast", name=names.new(f"{site.name}__Cast"),
                                          attrs={"to": to}, inputs=[stored], outputs=[weight]))
    return weight


def build_scaled(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int,
                 weight_of: Callable[[ConstantSite, gs.Constant, NameAllocator, int], gs.Tensor] = cast_weight) -> None:
    """Rewire every reader of `site` to read Cast(int8) (or what `weight_of` makes of the stored
    integers: dq_float's) and scale its output (module docstring); with zero points, subtract their
    term before the scale (`_zero_point_term`)."""
    qt = _flat_channels_without_zero_point(qt)
    behind_casts = through_casts(site)
    to = onnx.TensorProto.FLOAT if behind_casts else site.onnx_dtype  # the type the readers compute in
    dtype = SCALED_TYPES[to]  # the scales too
    scale = np.where(qt.scale == 0, 1, qt.scale).astype(dtype).ravel()  # all-zero channels: q is 0 there
    stored = gs.Constant(names.new(f"{site.name}_q"), np.ascontiguousarray(qt.q))
    weight = weight_of(site, stored, names, to)
    groups = effective_readers_by_graph(site)  # behind a 16-bit weight's Casts, in whichever graph
    for graph, readers in groups:
        # scales and zero points made once per graph, not per reader (ALBERT: 12 layers read each weight)
        constant = shared_constants(names, site.name)
        for node, index in readers:
            node.inputs[index] = weight
            if scales_before(node, len(site.shape), qt.axis):  # Attention: the data input times the scale
                scale_input(graph, node, scale, names, site.name, constant, suffix="scale")
                continue
            if qt.input_scale is not None:
                scale_input(graph, node, qt.input_scale.astype(dtype), names, site.name, constant)
            divide_bias(graph, node, scale, names)
            if qt.zero_point is not None and node.op == "Conv":
                conv_zero_point(graph, node, qt.zero_point, scale, names, site.name, constant)
                continue
            offset = None
            if qt.zero_point is not None:
                offset = _zero_point_term(graph, node, qt.zero_point, names, site.name, opset, constant)
            scale_output(graph, node, scale, names, site.name, constant, offset)


def shared_constants(names: NameAllocator, base: str):
    """constant(suffix, array): a gs.Constant named base_suffix, the same object again for the
    same suffix and values (small arrays: one value per channel)."""
    made = {}

    def constant(suffix: str, array: np.ndarray) -> gs.Constant:
        key = (suffix, array.shape, array.dtype.str, array.tobytes())  # Gemm's alpha changes the zero points
        if key not in made:
            made[key] = gs.Constant(names.new(f"{base}_{suffix}"), np.ascontiguousarray(array))
        return made[key]
    return constant


def _scale_shape(node: gs.Node, channels: int) -> list[int]:
    """Where the output channel sits in the reader's output: last for MatMul/Gemm, axis 1 for
    Conv (the scale gets trailing ones for the spatial axes)."""
    if node.op == "Conv":
        spatial = len(node.inputs[1].shape) - 2
        return [channels] + [1] * spatial
    return [channels]


def scale_input(graph: gs.Graph, node: gs.Node, r: np.ndarray, names: NameAllocator, base: str,
                 constant, suffix: str = "input_scale") -> None:
    """The reader's data input times r, along the axis it contracts with the weight: the last
    for MatMul and Gemm, the channel axis (1) for Conv."""
    shape = [r.size] + [1] * (len(node.inputs[1].shape) - 2) if node.op == "Conv" else [r.size]
    data = node.inputs[0]
    scaled = gs.Variable(names.new(f"{data.name}_equalized"), dtype=data.dtype, shape=data.shape)
    factor = constant(suffix, r.reshape(shape))
    graph.nodes.append(gs.Node("Mul", name=names.new(f"{base}__scale_before"), inputs=[data, factor],
                               outputs=[scaled]))
    node.inputs[0] = scaled


def divide_bias(graph: gs.Graph, node: gs.Node, scale: np.ndarray, names: NameAllocator) -> None:
    """Conv's bias and Gemm's C are added before our Mul: divide them by the scale (in numpy for
    an initializer; with a Div node, which onnxruntime folds, for a Constant node's output)."""
    if len(node.inputs) <= 2 or node.op not in ("Conv", "Gemm") or node.inputs[2].name == "":
        return
    bias = node.inputs[2]
    rank = len(bias.shape) if bias.shape is not None else 1
    view = scale.reshape(1, -1) if node.op == "Gemm" and rank == 2 else scale
    if isinstance(bias, gs.Constant):
        values = read_values(bias)
        divided = (values.astype(np.float64) / view).astype(values.dtype)
        node.inputs[2] = gs.Constant(names.new(f"{bias.name}_unscaled"), np.ascontiguousarray(divided))
        return
    unscaled = gs.Variable(names.new(f"{bias.name}_unscaled"), dtype=bias.dtype)
    graph.nodes.append(gs.Node("Div", name=names.new(f"{bias.name}__Div"),
                               inputs=[bias, gs.Constant(names.new(f"{bias.name}_scale"), view)], outputs=[unscaled]))
    node.inputs[2] = unscaled


def scale_output(graph: gs.Graph, node: gs.Node, scale: np.ndarray, names: NameAllocator, base: str,
                  constant, offset: gs.Variable | None = None) -> None:
    """The reader's output times the scale, less the zero points' `offset` first where given."""
    output = node.outputs[0]
    unscaled = gs.Variable(names.new(f"{output.name}_unscaled"), dtype=output.dtype, shape=output.shape)
    node.outputs[0] = unscaled
    if offset is not None:
        centred = gs.Variable(names.new(f"{output.name}_centred"), dtype=output.dtype, shape=output.shape)
        graph.nodes.append(gs.Node("Sub", name=names.new(f"{base}__zero_point"), inputs=[unscaled, offset],
                                   outputs=[centred]))
        unscaled = centred
    factor = constant("scale", scale.reshape(_scale_shape(node, scale.size)))
    graph.nodes.append(gs.Node("Mul", name=names.new(f"{base}__scale_after"), inputs=[unscaled, factor],
                               outputs=[output]))


def _flat_channels_without_zero_point(qt: Quantized) -> Quantized:
    """`qt` with q and z set to 0 in every channel whose integers all equal its zero point (a
    channel of zeros): X @ q and sum(X) * z are subtracted in float, and would leave rounding
    noise in an output channel that is exactly 0 in the original."""
    if qt.zero_point is None or qt.axis is None:
        return qt
    z = qt.zero_point.reshape(-1)
    rows = np.moveaxis(qt.q, qt.axis, 0).reshape(z.size, -1)
    # channels ruled out on their first values, then on 4x as many of the rest in turn: a whole
    # pass (and a transposed copy) over the integers cost 0.4 s of int8 on a 1.35 GB decoder
    flat, start, step = np.flatnonzero(z != 0), 0, 8
    while flat.size and start < rows.shape[1]:
        part = rows[flat, start:start + step]
        flat, start, step = flat[(part == z[flat, None].astype(rows.dtype)).all(axis=1)], start + step, 4 * step
    if not flat.size:
        return qt
    q, zero_point = qt.q.copy(), qt.zero_point.copy()
    np.moveaxis(q, qt.axis, 0)[flat] = 0
    zero_point.reshape(-1)[flat] = 0
    return dataclasses.replace(qt, q=q, zero_point=zero_point)


def _zero_point_term(graph: gs.Graph, node: gs.Node, zero_point: np.ndarray, names: NameAllocator, base: str,
                     opset: int, constant) -> gs.Variable:
    """sum(X over what each output element reads) * zero point, per output channel: with
    W = s * (q - z) per output channel, X @ W = s * (X @ q - sum(X) * z). The sum runs over the
    reader's data input (the equalized one): its contracted axis for MatMul and Gemm; for Conv,
    the channels, then a window of ones with the Conv's own strides, pads and dilations."""
    emit = Emitter(graph, names, base)
    data = node.inputs[0]
    z = zero_point.astype(np.float32).ravel()
    if node.op == "Conv":
        total = _reduce_sum(emit, constant, data, 1, opset)
        kernel = list(node.inputs[1].shape[2:])
        attrs = {k: v for k, v in node.attrs.items() if k in ("auto_pad", "dilations", "pads", "strides")}
        trivial = all(k == 1 for k in kernel) and all(v == 1 for v in attrs.get("strides", [1])) \
            and not any(attrs.get("pads", [0])) and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
        if not trivial:
            ones = constant("window", np.ones([1, 1, *kernel], np.float32))
            total = emit("Conv", [total, ones], **attrs)
        view = z.reshape(_scale_shape(node, z.size))
    else:
        trans_a = node.op == "Gemm" and node.attrs.get("transA", 0)
        total = _reduce_sum(emit, constant, data, 0 if trans_a else -1, opset)
        if trans_a:  # [1, M] -> [M, 1]
            total = emit("Transpose", [total], perm=[1, 0])
        view = z * float(node.attrs.get("alpha", 1.0)) if node.op == "Gemm" else z
    return emit("Mul", [total, constant("zero_point", view.astype(np.float32))])


def _reduce_sum(emit: Emitter, constant, data: gs.Tensor, axis: int, opset: int) -> gs.Variable:
    """ReduceSum over one axis, keeping it (axes moved from attribute to input at opset 13)."""
    if opset >= 13:
        return emit("ReduceSum", [data, constant(f"axes{axis}", np.array([axis], np.int64))], keepdims=1)
    return emit("ReduceSum", [data], axes=[axis], keepdims=1)


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    """One int8 scale per output channel, every reader able to take it after itself (module doc)."""
    axis = scale_axis(site)
    if axis is None and computes_in_float16(site):
        return "read in float16 arithmetic, where the integers before the scale could overflow"
    if axis is None:
        return "a reader cannot take the scale after it (float32 MatMul B, Gemm B, Conv W or FusedMatMul B only)"
    if dtype != "int8" or scheme.granularity != "channel" or scheme.axis != axis:
        return f"scaled stores int8 with one scale per output channel (axis {axis})"
    return None


LOWERING = Lowering("scaled", "int8 Cast, the scale applied after the reader: one float copy at load", fits,
                    lambda site, qt, names, opset: build_scaled(site, qt, names, opset),
                    float_zero_points=True, float_copies=lambda granularity, zero_points: 1, equalized=True)
