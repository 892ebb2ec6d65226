"""A joined MatMul over a 4-bit weight's DequantizeLinear, run as two MatMuls over its nibbles
(twinned.py; issue 58: int4's verification cost twice int8's share).

Before: a uint4 [K, N] initializer (blocks of rows, scales and zero points [K/b, N]) ->
DequantizeLinear -> MatMul. onnxruntime 1.32 dequantizes 4-bit blocks in a scalar loop on one
core (dec-l4's result: 623 of its run's 833 ms) into a fresh float copy of the whole weight.

After: the same bytes read as uint8 [K, N/2] (N even): each byte holds columns 2j (low nibble)
and 2j + 1 (high nibble) of row k, so BitwiseAnd 15 and BitShift 4 give the even and the odd
columns as uint8; each is dequantized (the 8-bit kernel: the same (x - zero point) * scale in
float, bit for bit) with the scales' and zero points' even or odd columns, multiplied, and the
two products interleaved back into [rows, N]. Each output column is what the whole product
computes, bit for bit: MLAS's SGEMM sums a column over K in the same blocks whatever the other
columns, while each thread's share of a half is over 64 columns and K over 128 (joined.py's
rule, cast_chunks). A [2048, 5632] weight at 24 rows, one thread: 82-101 -> 38-40 ms of CPU,
and each float copy is half as large.

An int4 weight (with its int4 zero points) has each byte's two nibbles' top bits flipped first
(BitwiseXor 0x88): a signed nibble v read as unsigned is then v + 8, and (x + 8) - (z + 8) is x - z.
Limits: an int4 weight without zero points keeps DequantizeLinear (its zero, 0, has no such
offset form); blocks along axis 0, the weight and its zero points read by this DequantizeLinear alone, held as
raw bytes or external data (their declared type and shape change, not their bytes).
"""

from __future__ import annotations

import collections
import os

import onnx
from onnx import helper

from .joined import MIN_ROWS

_NIBBLES = (onnx.TensorProto.UINT4, onnx.TensorProto.INT4)

# MLAS's stride rule (joined.py): each thread's share of a half's columns must stay over 64
_THREAD_COLUMNS = 64


class Weights:
    """A graph's initializers by name and how many of `nodes` read each name (an input read twice
    by one node counts twice), made once for every weight twinned.twin_graph asks about."""

    def __init__(self, graph: onnx.GraphProto, nodes: list[onnx.NodeProto]):
        self.initializers = {t.name: t for t in graph.initializer}
        self.readers = collections.Counter(name for n in nodes for name in n.input)


def uint4_halves(dequantize: onnx.NodeProto | None, weights: Weights) -> tuple[onnx.TensorProto, ...] | None:
    """(weight, scale, zero point or None) where `dequantize` is what this module rewrites (module
    doc): a DequantizeLinear of a uint4 [K, N] initializer in blocks along axis 0, its zero point
    uint4 too; else None."""
    if dequantize is None or dequantize.op_type != "DequantizeLinear" or dequantize.domain not in ("", "ai.onnx"):
        return None
    attributes = {a.name: a.i for a in dequantize.attribute}
    if attributes.get("axis", 1) not in (0, -2) or attributes.get("block_size", 0) <= 0 or \
            set(attributes) - {"axis", "block_size"}:
        return None
    if weights.readers[dequantize.output[0]] != 1:
        return None  # its float copy read elsewhere too
    tensors = [weights.initializers.get(name) for name in dequantize.input]
    if len(tensors) < 2 or any(t is None for t in tensors):
        return None
    weight, scale, zero = (*tensors, None)[:3]
    threads = os.cpu_count() or 1
    if weight.data_type not in _NIBBLES or len(weight.dims) != 2 or len(scale.dims) != 2 or \
            scale.data_type != onnx.TensorProto.FLOAT or weight.dims[0] < MIN_ROWS or weight.dims[1] % 2 or \
            weight.dims[1] // 2 <= _THREAD_COLUMNS * threads or scale.dims[1] != weight.dims[1]:
        return None
    if zero is None and weight.data_type == onnx.TensorProto.INT4:
        return None  # its zero is 0, which an offset nibble cannot say (below)
    if zero is not None and (zero.data_type != weight.data_type or list(zero.dims) != list(scale.dims)):
        return None
    for tensor in (weight, zero):
        if tensor is not None and not (tensor.HasField("raw_data") or
                                       tensor.data_location == onnx.TensorProto.EXTERNAL):
            return None  # int32_data packs nibbles otherwise than uint8 values
        if tensor is not None and weights.readers[tensor.name] != 1:
            return None
    return weight, scale, zero


def nibble_halves(matmul: onnx.NodeProto, dequantize: onnx.NodeProto, tensors: tuple,
                  constants: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    """`matmul` (a joined MatMul reading `dequantize`'s output, `uint4_halves` said yes, giving
    `tensors`) as the module doc's nodes, its output under its own name. The weight and zero point
    initializers are declared uint8 [rows, columns / 2] in place; the new constants go to
    `constants`."""
    weight, scale, zero = tensors
    stem, signed = matmul.output[0], weight.data_type == onnx.TensorProto.INT4
    for tensor in (weight, zero):
        if tensor is not None:
            tensor.data_type = onnx.TensorProto.UINT8
            tensor.dims[1] //= 2
    names = {key: f"{stem}_nibble_{key}" for key in ("mask", "shift", "step", "axis", "end", "last", "shape", "flip")}
    constants += [helper.make_tensor(names["mask"], onnx.TensorProto.UINT8, [], [15]),
                  helper.make_tensor(names["shift"], onnx.TensorProto.UINT8, [], [4]),
                  helper.make_tensor(names["step"], onnx.TensorProto.INT64, [1], [2]),
                  helper.make_tensor(names["axis"], onnx.TensorProto.INT64, [1], [1]),
                  helper.make_tensor(names["end"], onnx.TensorProto.INT64, [1], [scale.dims[1]]),
                  helper.make_tensor(names["last"], onnx.TensorProto.INT64, [1], [-1]),
                  helper.make_tensor(names["shape"], onnx.TensorProto.INT64, [2], [0, -1])]
    nodes, parts = [], []
    packed = {t.name: t.name for t in (weight, zero) if t is not None}
    if signed:  # an int4 nibble v as the uint4 v + 8 (its top bit flipped): x - z is the same
        constants.append(helper.make_tensor(names["flip"], onnx.TensorProto.UINT8, [], [0x88]))
        for name in packed:
            packed[name] = f"{stem}_offset_{len(nodes)}"
            nodes.append(helper.make_node("BitwiseXor", [name, names["flip"]], [packed[name]]))
    for k, side in enumerate(("even", "odd")):
        start = f"{stem}_nibble_start{k}"
        constants.append(helper.make_tensor(start, onnx.TensorProto.INT64, [1], [k]))

        inputs = [f"{stem}_{side}_quantized", f"{stem}_{side}_scale"]
        nodes += [_nibbles(side, packed[weight.name], inputs[0], names),
                  helper.make_node("Slice", [scale.name, start, names["end"], names["axis"], names["step"]],
                                   [inputs[1]])]
        if zero is not None:
            inputs.append(f"{stem}_{side}_zero_point")
            nodes.append(_nibbles(side, packed[zero.name], inputs[2], names))
        copy = onnx.NodeProto()
        copy.CopyFrom(dequantize)
        copy.name = f"{dequantize.name}_{side}" if dequantize.name else ""
        copy.input[:] = inputs
        copy.output[:] = [f"{stem}_{side}_weight"]
        product = onnx.NodeProto()
        product.CopyFrom(matmul)
        product.name = f"{matmul.name}_{side}" if matmul.name else ""
        product.input[1] = copy.output[0]
        product.output[:] = [f"{stem}_{side}"]
        nodes += [copy, product, helper.make_node("Unsqueeze", [product.output[0], names["last"]],
                                                  [f"{stem}_{side}_columns"])]
        parts.append(f"{stem}_{side}_columns")
    return nodes + [helper.make_node("Concat", parts, [f"{stem}_pairs"], axis=-1),
                    helper.make_node("Reshape", [f"{stem}_pairs", names["shape"]], [stem])]


def _nibbles(side: str, packed: str, out: str, names: dict[str, str]) -> onnx.NodeProto:
    """The even columns' (low) or the odd columns' (high) nibbles of `packed`'s bytes, as uint8."""
    if side == "even":
        return helper.make_node("BitwiseAnd", [packed, names["mask"]], [out])
    return helper.make_node("BitShift", [packed, names["shift"]], [out], direction="RIGHT")
