"""The `dq_float` lowering (issue 55): the lean `scaled` form's integers, scales and input rows,
its Cast replaced by a DequantizeLinear (per tensor, scale 1) and a Reshape to the weight's own
shape, so that onnxruntime keeps the integers in memory at load and computes the MatMul in float.
What the memory rule keeps of a MatMul weight.

Before: X -> MatMul (W [K, N] float32) -> Y
After:  X -> Mul(r) -> MatMul <- Reshape([K, N]) <- DequantizeLinear(Wq [K, N], 1.0)
                       MatMul -> Mul(scale per output channel) -> Y

onnxruntime 1.32's CPU session fuses DequantizeLinear -> MatMul into MatMulNBits wherever the
weight is [K, N] in blocks along axis 0, per tensor or per channel along axis 1
(qdq_selectors.cc, ValidateDQForMatMulNBits), and that kernel quantizes the activations to int8
(session.qdq_matmulnbits_accuracy_level defaults to 4): the zoo's fsmn_vad lost to
onnx-shrink-ray's float-at-load file there (relative L2 on the report set 0.0245 against 0.0221).
With a Reshape between them the fusion does not match; onnxruntime neither folds
DequantizeLinear nor the Reshape after it, so it dequantizes at every inference and runs its
float MatMul. Per tensor because its DequantizeLinear is vectorized and the per-channel one is
not: a 768x1536 weight, 40 rows, one thread, CPU per run: float 1.01 ms, per channel 3.45 ms,
per tensor with the scale after 1.49 ms. Measured and not kept: the weight stored [N, K] behind
a Transpose (onnxruntime's transpose optimizer moved the Transpose onto the integers, and the
pair fused again); [1, K, N] (unfused too, but it changes the output's rank where the MatMul's
input is 2-D).

Limits: 2-D weights read only as B of MatMuls that compute in float32 (float32 weights, or
16-bit ones read through Casts to float32); as `scaled` otherwise (zero points subtracted in
float after the MatMul); a later onnxruntime that drops a Reshape to the same shape before its
fusion would fuse it again."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter, const
from ..options import Scheme, dq_opset
from ..rounding import Quantized
from .base import Lowering
from .scaled import build_scaled, fits as scaled_fits
from .weight_readers import effective_readers, through_casts


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    readers = effective_readers(site)
    if len(site.shape) != 2 or (site.onnx_dtype != onnx.TensorProto.FLOAT and through_casts(site) is None):
        return "2-D float32 weights only (or 16-bit ones read through Casts to float32)"
    if not readers or not all(n.op == "MatMul" and i == 1 for n, i in readers):
        return "needs a weight read only as B of MatMuls"
    return scaled_fits(site, scheme, dtype, opset)


def dequantized(site: ConstantSite, stored: gs.Constant, names: NameAllocator, to: int) -> gs.Tensor:
    """The integers in float32 at run time: DequantizeLinear (scale 1), then a Reshape to the
    weight's own shape (module docstring)."""
    emit = Emitter(site.scope.graph, names, site.name)
    shape = list(site.shape)
    out = emit("DequantizeLinear", [stored, const(names, f"{site.name}_unit", np.array(1.0, np.float32))],
               shape=shape)
    return emit("Reshape", [out, const(names, f"{site.name}_shape", np.array(shape, np.int64))], shape=shape)


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    build_scaled(site, qt, names, opset, weight_of=dequantized)


LOWERING = Lowering("dq_float", "int8 DequantizeLinear per tensor and a Reshape before the MatMul, the scale after "
                    "it: the integers stay in memory, the MatMul runs in float", fits, build,
                    min_opset=dq_opset, float_zero_points=True, equalized=True)
