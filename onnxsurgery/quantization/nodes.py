"""The small pieces every lowering builds from: named constants, 4-bit packing, an emitter of
nodes, and the shapes scales and zero points take to broadcast."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from ..graph_utils import NameAllocator, c_order
from .options import ONNX_INT
from .packing import pack_halves, pack_nibbles
from .rounding import Quantized

def const(names: NameAllocator, base: str, array: np.ndarray) -> gs.Constant:
    return gs.Constant(names.new(base), c_order(array))


def int_tensor(names: NameAllocator, base: str, values: np.ndarray, dtype: str) -> gs.Constant:
    """An integer constant of ONNX type `dtype` (4-bit types packed, which gs cannot export)."""
    if dtype in ("int8", "uint8"):
        # the rounding's own integers where they are of that type already (no copy of the weight)
        return const(names, base, values.astype(np.int8 if dtype == "int8" else np.uint8, copy=False))
    proto = onnx.helper.make_tensor(names.new(base), ONNX_INT[dtype], list(values.shape),
                                    pack_nibbles(values, dtype == "int4").tobytes(), raw=True)
    return gs.Constant(proto.name, LazyValues(proto))


class Emitter:
    """Appends nodes to one graph, each producing a fresh float or int Variable."""

    def __init__(self, graph: gs.Graph, names: NameAllocator, base: str):
        self.graph, self.names, self.base = graph, names, base

    def __call__(self, op: str, inputs: list, dtype=np.float32, shape=None, **attrs) -> gs.Variable:
        out = gs.Variable(self.names.new(f"{self.base}__{op.lower()}"), dtype=dtype, shape=shape)
        self.graph.nodes.append(gs.Node(op, name=self.names.new(f"{self.base}__{op}"), attrs=attrs,
                                        inputs=inputs, outputs=[out]))
        return out


def blocked_shape(qt: Quantized, shape: list[int]) -> list[int]:
    """The weight's shape with the blocked axis split in two (blocks, block), for the scales to
    broadcast; the shape itself for other schemes."""
    work_shape = list(shape)
    if qt.granularity == "block":
        work_shape[qt.axis:qt.axis + 1] = [shape[qt.axis] // qt.block_size, qt.block_size]
    return work_shape


def nibble_offset(qt: Quantized) -> int:
    """4-bit values are stored as nibbles 0..15: int4 shifted by 8."""
    return 8 if qt.dtype == "int4" else 0


def zero_to_subtract(qt: Quantized, view: list[int], names: NameAllocator, base: str) -> gs.Constant | None:
    """What the stored integers have to lose before scaling: the zero points as stored
    integers (int8/uint8, offset like the nibbles; cast to float in the graph), int4's bare
    offset of 8 as a float scalar, or None."""
    offset = nibble_offset(qt)
    if qt.zero_point is not None:
        zp = (qt.zero_point.astype(np.int16) + offset).reshape(view)
        return const(names, f"{base}_zero_point", zp.astype(np.int8 if qt.dtype == "int8" else np.uint8))
    if offset:
        return const(names, f"{base}_offset", np.array(offset, np.float32))
    return None


def broadcast_shape(qt: Quantized, shape: list[int]) -> list[int]:
    """Shape that scale/zero-point constants take so that they broadcast against q (blocked q
    for blocks)."""
    if qt.granularity == "tensor":
        return []
    if qt.granularity == "channel":
        view = [1] * len(shape)
        view[qt.axis] = shape[qt.axis]
        return view
    blocked = list(shape)
    blocked[qt.axis:qt.axis + 1] = [shape[qt.axis] // qt.block_size, 1]
    return blocked


def unpack_nibbles(nibbles: np.ndarray, emit: Emitter, names: NameAllocator, base: str,
                    opset: int) -> gs.Variable:
    """Store flat values 0..15 two per byte (`pack_halves`) and emit the nodes that unpack
    them into a flat integer tensor. onnxruntime folds these at session start and holds each
    intermediate until folding ends, so they stay one byte per value (uint8 BitShift) from
    opset 11; before that, uint8 has no arithmetic and the split runs in int32."""
    even = nibbles.size - nibbles.size % 2
    packed = const(names, f"{base}_q4", pack_halves(nibbles[:even]))
    if opset >= 11:
        dtype = np.uint8
        lo, hi = split_nibbles(packed, emit, names, base)
    else:
        dtype, sixteen = np.int32, const(names, f"{base}_16", np.array(16, np.int32))
        p = emit("Cast", [packed], dtype=dtype, to=onnx.TensorProto.INT32)
        hi = emit("Div", [p, sixteen], dtype=dtype)
        lo = emit("Sub", [p, emit("Mul", [hi, sixteen], dtype=dtype)], dtype=dtype)
    parts = [lo, hi]
    if nibbles.size % 2:  # an odd count: the last value on its own
        parts.append(const(names, f"{base}_q4_last", nibbles[even:].astype(dtype)))
    return emit("Concat", parts, dtype=dtype, axis=0)


def split_nibbles(packed: gs.Tensor, emit: Emitter, names: NameAllocator, base: str):
    """(low nibbles, high nibbles) of uint8 bytes, with uint8 BitShift (opset 11)."""
    four = const(names, f"{base}_4", np.array(4, np.uint8))
    hi = emit("BitShift", [packed, four], dtype=np.uint8, direction="RIGHT")
    lo = emit("BitShift", [emit("BitShift", [packed, four], dtype=np.uint8, direction="LEFT"), four],
              dtype=np.uint8, direction="RIGHT")
    return lo, hi
