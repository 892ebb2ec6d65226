"""The `arith` lowering: Cast -> [Sub zero point] -> Mul scale [-> Reshape] [-> Cast], with
4-bit values stored two per uint8 and unpacked with BitShift (opset 11 on; Cast/Div/Mul/Sub in
int32 before), so any scheme works at any opset. onnxruntime folds the chain at session start:
no run-time cost, float weights in memory, and while folding it holds every intermediate (four
weight-sized float copies for blocks with zero points, two for Cast -> Mul)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter, broadcast_shape, const, int_tensor, nibble_offset, unpack_nibbles, blocked_shape, \
    zero_to_subtract
from ..options import FLOAT_TYPES
from ..rounding import Quantized
from .base import Lowering, always


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor:
    emit = Emitter(site.scope.graph, names, site.name)
    shape = list(site.shape)
    out = build_arith(qt, emit, names, site.name, shape, opset)
    if site.onnx_dtype != onnx.TensorProto.FLOAT:
        out = emit("Cast", [out], dtype=FLOAT_TYPES[site.onnx_dtype], shape=shape, to=site.onnx_dtype)
    return out


def build_arith(qt: Quantized, emit: Emitter, names: NameAllocator, base: str, shape: list[int],
                opset: int) -> gs.Variable:
    four_bit = qt.dtype in ("int4", "uint4")
    view = broadcast_shape(qt, shape)
    zero = zero_to_subtract(qt, view, names, base)
    if zero is not None and zero.values.dtype != np.float32:  # integers, folded at session start
        zero = emit("Cast", [zero], to=onnx.TensorProto.FLOAT)
    blocked = qt.granularity == "block"
    work_shape = blocked_shape(qt, shape)  # blocks get an axis of their own, for the scales to broadcast
    if four_bit:
        nibbles = (qt.q.astype(np.int16) + nibble_offset(qt)).ravel()  # C order of the (blocked) work shape
        q = unpack_nibbles(nibbles, emit, names, base, opset)
        q = emit("Reshape", [q, const(names, f"{base}_qshape", np.array(work_shape, np.int64))], dtype=q.dtype)
        q = emit("Cast", [q], to=onnx.TensorProto.FLOAT)
    else:
        # Stored already blocked (same bytes): onnxruntime folds the chain at session start and
        # holds every float intermediate until folding ends, so one float Reshape fewer is
        # one weight-sized float copy less at load time.
        stored = int_tensor(names, f"{base}_q", qt.q.reshape(work_shape), qt.dtype)
        q = emit("Cast", [stored], to=onnx.TensorProto.FLOAT)
    if zero is not None:
        q = emit("Sub", [q, zero])
    scale = const(names, f"{base}_scale", qt.scale.reshape(view))
    if qt.scale.dtype != np.float32:  # float16 scales (half the bytes), folded at session start
        scale = emit("Cast", [scale], to=onnx.TensorProto.FLOAT)
    x = emit("Mul", [q, scale])
    if blocked:
        x = emit("Reshape", [x, const(names, f"{base}_shape", np.array(shape, np.int64))], shape=shape)
    return x


def float_copies(granularity: str, zero_points: bool) -> int:
    """Cast, [Sub], Mul and, for blocks, Reshape: each a weight-sized float copy while folding."""
    return 2 + zero_points + (granularity == "block")


LOWERING = Lowering("arith", "Cast -> Mul chain, folded into a float weight at load", always, build,
                    float_scales=False, float_copies=float_copies)
