"""The `arith` lowering: Cast -> [Sub zero point] -> Mul scale [-> Reshape] [-> Cast], with
4-bit values stored two per uint8 and unpacked with BitShift (opset 11 on; Cast/Div/Mul/Sub in
int32 before), so any scheme works at any opset. onnxruntime folds the chain at session start:
no run-time cost, float weights in memory, and while folding it holds every intermediate (four
weight-sized float copies for blocks with zero points, two for Cast -> Mul).

A 16-bit weight's chain computes in float32 and ends in a Cast to the weight's type: onnxruntime's
CPU provider has no float16 Sub or Mul kernel, so it cannot fold a float16 chain, and ran one at
every inference instead (slovorez's float16 Conv tagger: 2.9x its original's latency, zoo
invariant 7). (q - z) * s has at most 9 + 11 significant bits, exact in float32: the Cast rounds
once, the values a float16 chain would give. A weight read only through Casts to float32
(weight_readers.through_casts) has no Cast: the float32 chain feeds the readers behind them."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter, broadcast_shape, const, int_tensor, nibble_offset, unpack_nibbles, blocked_shape, \
    zero_to_subtract
from ..rounding import Quantized
from .base import Lowering, always
from .weight_readers import feed_or_cast_back


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor:
    emit = Emitter(site.scope.graph, names, site.name)
    shape = list(site.shape)
    out = build_arith(qt, emit, names, site.name, shape, opset)
    return feed_or_cast_back(site, out, emit, shape)


def build_arith(qt: Quantized, emit: Emitter, names: NameAllocator, base: str, shape: list[int],
                opset: int, to: int = onnx.TensorProto.FLOAT) -> gs.Variable:
    """The chain in float type `to` (float32, or float16 for a float16 weight: module docstring)."""
    four_bit = qt.dtype in ("int4", "uint4")
    view = broadcast_shape(qt, shape)
    float_dtype = np.float16 if to == onnx.TensorProto.FLOAT16 else np.float32
    zero = zero_to_subtract(qt, view, names, base)
    if zero is not None and zero.values.dtype.kind == "f" and zero.values.dtype != float_dtype:  # int4's offset
        zero = const(names, f"{base}_offset", zero.values.astype(float_dtype))
    elif zero is not None and zero.values.dtype != float_dtype:  # integers, folded at session start
        zero = emit("Cast", [zero], dtype=float_dtype, to=to)
    blocked = qt.granularity == "block"
    work_shape = blocked_shape(qt, shape)  # blocks get an axis of their own, for the scales to broadcast
    if four_bit:
        nibbles = (qt.q.astype(np.int16) + nibble_offset(qt)).ravel()  # C order of the (blocked) work shape
        q = unpack_nibbles(nibbles, emit, names, base, opset)
        q = emit("Reshape", [q, const(names, f"{base}_qshape", np.array(work_shape, np.int64))], dtype=q.dtype)
        q = emit("Cast", [q], dtype=float_dtype, to=to)
    else:
        # Stored already blocked (same bytes): onnxruntime folds the chain at session start and
        # holds every float intermediate until folding ends, so one float Reshape fewer is
        # one weight-sized float copy less at load time.
        stored = int_tensor(names, f"{base}_q", qt.q.reshape(work_shape), qt.dtype)
        q = emit("Cast", [stored], dtype=float_dtype, to=to)
    if zero is not None:
        q = emit("Sub", [q, zero], dtype=float_dtype)
    scale = const(names, f"{base}_scale", qt.scale.reshape(view))
    if qt.scale.dtype != float_dtype:  # float16 scales of a float32 weight (half the bytes), folded at load
        scale = emit("Cast", [scale], dtype=float_dtype, to=to)
    x = emit("Mul", [q, scale], dtype=float_dtype)
    if blocked:
        x = emit("Reshape", [x, const(names, f"{base}_shape", np.array(shape, np.int64))], dtype=float_dtype,
                 shape=shape)
    return x


def float_copies(granularity: str, zero_points: bool) -> int:
    """Cast, [Sub], Mul and, for blocks, Reshape: each a weight-sized float copy while folding."""
    return 2 + zero_points + (granularity == "block")


LOWERING = Lowering("arith", "Cast -> Mul chain, folded into a float weight at load", always, build,
                    float_scales=False, float_copies=float_copies)
