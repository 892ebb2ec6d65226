"""The `dq_float` lowering (issue 55): `dq_equalized` for a weight read only as B of MatMuls,
with a Reshape to its own shape between the DequantizeLinear and the MatMul, so that onnxruntime
computes the MatMul in float while the integers stay in memory at load.

Before: X -> MatMul (W [K, N] float32) -> Y
After:  X -> Mul(r) -> MatMul <- Reshape([K, N]) <- DequantizeLinear(Wq [K, N], scale [N], axis=1)

onnxruntime 1.32's CPU session fuses DequantizeLinear -> MatMul into MatMulNBits wherever the
weight is [K, N] in blocks along axis 0, per tensor or per channel along axis 1
(qdq_selectors.cc, ValidateDQForMatMulNBits), and that kernel quantizes the activations to int8
(session.qdq_matmulnbits_accuracy_level defaults to 4): the zoo's fsmn_vad lost to
onnx-shrink-ray's float-at-load file there (relative L2 on the report set 0.0245 against 0.0221).
With the Reshape between them the fusion does not match, and onnxruntime dequantizes at every
inference and runs its float MatMul: fsmn_vad 0.0208, the same integers and scales. Measured
and not kept: the weight stored [N, K] per row behind a Transpose (onnxruntime's transpose
optimizer moved the Transpose onto the integers, and the pair fused again), and [1, K, N]
(unfused too, but it changes the output's rank where the MatMul's input is 2-D).

Limits: 2-D float32 weights (or 16-bit ones read through Casts to float32) read only as B of
MatMuls; one scale per output channel; opset 13 (DequantizeLinear's axis); a later
onnxruntime that removes a Reshape to the same shape before fusing would fuse it again."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..nodes import Emitter, const
from ..options import Scheme, dq_opset
from ..rounding import Quantized
from .base import Lowering
from .dq import emit_dq
from .dq_equalized import build_with, fits as equalized_fits
from .weight_readers import effective_readers, through_casts


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    readers = effective_readers(site)
    if len(site.shape) != 2 or (site.onnx_dtype != onnx.TensorProto.FLOAT and through_casts(site) is None):
        return "2-D float32 weights only (or 16-bit ones read through Casts to float32)"
    if not readers or not all(n.op == "MatMul" and i == 1 for n, i in readers):
        return "needs a weight read only as B of MatMuls"
    return equalized_fits(site, scheme, dtype, opset)


def emit_reshaped(site: ConstantSite, qt: Quantized, names: NameAllocator, shape: list[int]) -> gs.Tensor | None:
    """The DequantizeLinear of `qt`, then a Reshape to `shape`, its own (module docstring); None
    where the readers behind a 16-bit weight's Casts were given it directly (dq.emit_dq)."""
    behind = through_casts(site)  # before emit_dq rewires them
    out = emit_dq(site, qt, names, shape)
    emit = Emitter(site.scope.graph, names, site.name)
    target = const(names, f"{site.name}_shape", np.array(shape, dtype=np.int64))
    if out is not None:
        return emit("Reshape", [out, target], shape=shape)
    node, index = behind[0]
    reshaped = emit("Reshape", [node.inputs[index], target], shape=shape)
    for node, index in behind:
        node.inputs[index] = reshaped
    return None


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor | None:
    return build_with(site, qt, names, emit_reshaped)


LOWERING = Lowering("dq_float", "DequantizeLinear per output channel, a Reshape before the MatMul: onnxruntime "
                    "keeps the integers in memory and computes the MatMul in float", fits, build,
                    min_opset=dq_opset, equalized=True)
