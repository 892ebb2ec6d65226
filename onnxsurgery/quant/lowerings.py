"""The nodes that turn stored integers back into the weight: `dq` (DequantizeLinear) and
`arith` (Cast -> [Sub] -> Mul [-> Reshape], 4-bit unpacked with BitShift), and the dispatch to
the lowerings that rewrite the readers instead (gathered.py, scaled.py, matmul_nbits.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import ConstantSite, NameAllocator
from .gathered import build_gathered
from .matmul_nbits import build_matmul_nbits
from .nodes import Emitter, broadcast_shape, const, int_tensor, nibble_offset, unpack_nibbles, blocked_shape, \
    zero_to_subtract
from .options import FLOAT_TYPES
from .rounding import Quantized
from .scaled import build_scaled

def build(site: ConstantSite, qt: Quantized, lowering: str, names: NameAllocator, opset: int) -> gs.Tensor | None:
    """The nodes that turn the stored integers back into the weight; returns the tensor that
    replaces it, or None when the consumers were rewritten instead (`gather`)."""
    if lowering == "gather":
        build_gathered(site, qt, names)
        return None
    if lowering == "scaled":
        build_scaled(site, qt, names, opset)
        return None
    if lowering == "matmulnbits":
        build_matmul_nbits(site, qt, names)
        return None
    base = site.name
    emit = Emitter(site.scope.graph, names, base)
    shape = list(site.shape)
    target = FLOAT_TYPES[site.onnx_dtype]
    if lowering == "dq":
        inputs = [int_tensor(names, f"{base}_q", qt.q, qt.dtype), const(names, f"{base}_scale", qt.scale)]
        if qt.zero_point is not None:
            inputs.append(int_tensor(names, f"{base}_zero_point", qt.zero_point, qt.dtype))
        attrs = {}
        if qt.granularity != "tensor":
            attrs["axis"] = qt.axis
        if qt.granularity == "block":
            attrs["block_size"] = qt.block_size
        out = emit("DequantizeLinear", inputs, shape=shape, **attrs)
    else:
        out = build_arith(qt, emit, names, base, shape, opset)
    if site.onnx_dtype != onnx.TensorProto.FLOAT:
        out = emit("Cast", [out], dtype=target, shape=shape, to=site.onnx_dtype)
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
