"""The `arith_equalized` lowering: the `arith` chain with scaled.py's input-side equalization
folded into it, for a float16 weight whose readers multiply it in float16.

Before: W (float16) -> Conv / MatMul / Gemm (float16 arithmetic)
After:  Wq (int8) -> Cast -> [Sub zero point] -> Mul(scale per output channel) -> Mul(r per
        input channel) -> Cast(float16) -> the same readers

Why: a float32 weight's lean form is `scaled`, whose equalization (W / r quantized per output
channel, the reader's input times r) halves the error on weights with uneven input rows
(scaled.py: ddddocr's convolutions 0.029 -> 0.018). A float16 weight read in float16 cannot take
`scaled` (its unscaled output would overflow float16), so it got the plain `arith` chain and lost
that: trueocr_rec's float16 storage 0.0183 relative L2 on the zoo's report set against 0.0100 as
shipped; the float16 plan applied to the same float16 values computed in float32 gave 0.0184, so
the plan, not float16 arithmetic, made the difference (docs/quantization.md, storage11). Here r
multiplies the dequantized weight instead of the input: onnxruntime folds the chain at session
start like `arith` (no node at run time, the readers compute in float16 as before), and
(q - z) * s * r is computed in float32, rounded to float16 once by the last Cast.

Limits: one scale per output channel, readers that take an input-side scale (scaled.equalized_axis:
MatMul B 2-D, Gemm B without transA, Conv with one group); while onnxruntime folds the chain at
load it holds the scales' outer product too ([O, I]: a weight's size for a 1x1 Conv or a MatMul).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter, broadcast_shape, const, int_tensor, zero_to_subtract
from ..options import Scheme
from ..rounding import Quantized
from .arith import build_arith
from .base import Lowering
from .scaled import equalized_axis, output_axis_ignoring_float16
from .weight_readers import feed_or_cast_back


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    if scheme.granularity != "channel":
        return "one scale per output channel only"
    if equalized_axis(site) is None:
        return "a reader cannot take an input-side scale (grouped Conv, Gemm with transA, ...)"
    if scheme.axis != output_axis_ignoring_float16(site):
        return "scales along the readers' output channels only"
    return None


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor | None:
    emit = Emitter(site.scope.graph, names, site.name)
    shape = list(site.shape)
    if qt.input_scale is None or qt.granularity != "channel" or qt.dtype not in ("int8", "uint8"):
        out = build_arith(qt, emit, names, site.name, shape, opset)
        if qt.input_scale is not None:
            out = emit("Mul", [out, _input_scale(qt, names, site.name, shape)], dtype=np.float32, shape=shape)
    else:
        out = _equalized_chain(qt, emit, names, site.name, shape)
    return feed_or_cast_back(site, out, emit, shape)


def _input_scale(qt: Quantized, names: NameAllocator, base: str, shape: list[int]) -> gs.Constant:
    along = [1] * len(shape)
    along[qt.input_axis] = -1
    return const(names, f"{base}_input_scale", qt.input_scale.astype(np.float32).reshape(along))


def _equalized_chain(qt: Quantized, emit: Emitter, names: NameAllocator, base: str, shape: list[int]) -> gs.Variable:
    """Cast -> [Sub] -> Mul(s * r): the two scales' outer product (an output channel's by an
    input channel's, [O, I, 1, ..]) is one small constant folded first, so the chain holds no
    weight-sized copy more than `arith` while onnxruntime folds it, a 3x3 Conv's product a ninth
    of one (isnet_fp16: 859 MB after session creation with a Mul by r after the Mul by s, against
    `arith`'s 700)."""
    view = broadcast_shape(qt, shape)
    q = emit("Cast", [int_tensor(names, f"{base}_q", qt.q, qt.dtype)], dtype=np.float32, to=onnx.TensorProto.FLOAT)
    zero = zero_to_subtract(qt, view, names, base)
    if zero is not None:
        q = emit("Sub", [q, emit("Cast", [zero], dtype=np.float32, to=onnx.TensorProto.FLOAT)], dtype=np.float32)
    scale = const(names, f"{base}_scale", qt.scale.reshape(view))
    if qt.scale.dtype != np.float32:  # float16 scales (half the bytes), cast at load
        scale = emit("Cast", [scale], dtype=np.float32, to=onnx.TensorProto.FLOAT)
    both = emit("Mul", [scale, _input_scale(qt, names, base, shape)], dtype=np.float32)
    return emit("Mul", [q, both], dtype=np.float32, shape=shape)


def float_copies(granularity: str, zero_points: bool) -> int:
    """Cast, [Sub] and Mul: each a weight-sized float copy while folding (the scales' product at
    most one more, for a 1x1 Conv or a MatMul; counted as none)."""
    return 2 + zero_points


LOWERING = Lowering("arith_equalized", "Cast -> Mul chain with input-side scales, folded into a float16 weight at "
                    "load", fits, build, float_scales=False, float_copies=float_copies, equalized=True)
