"""The `matmulnbits` lowering (`--target onnxruntime`): a MatMul weight becomes onnxruntime's
com.microsoft MatMulNBits, which keeps the weight 4- or 8-bit in memory and dequantizes it
block by block inside the kernel.

Before: X -> MatMul(X, W[K, N]) -> Y
After:  X -> MatMulNBits(X, B, scales[, zero_points]; K, N, bits, block_size, accuracy_level=0) -> Y

Layout (onnxruntime's contrib op spec): B is uint8 [N, K / block, block * bits / 8], each
column's blocks in a row, 4-bit values two per byte, the first in the low nibble; scales float
[N * K / block]; zero points uint8 [N * ceil(blocks * bits / 8)], packed the same way (absent:
2^(bits - 1)). Signed integers are stored with that offset, so they need no zero point when
symmetric. accuracy_level 0 keeps the arithmetic in float: the same outputs as dequantizing
first, unlike the DequantizeLinear -> MatMul fusion, whose default quantizes activations to int8.

Limits: not a standard op, so only onnxruntime runs the result (hence behind --target).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers, readers_by_graph
import onnx

from ..options import Scheme
from ..rounding import Quantized
from .base import Lowering

_OFFSET = {"int8": 128, "uint8": 0, "int4": 8, "uint4": 0}


def _pack(values: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned values along the last axis, two per byte (low nibble first) when 4-bit."""
    values = values.astype(np.uint8)
    if bits == 8:
        return values
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros(values.shape[:-1] + (1,), np.uint8)], axis=-1)
    return values[..., 0::2] | (values[..., 1::2] << 4)


def build_matmul_nbits(site: ConstantSite, qt: Quantized, names: NameAllocator) -> None:
    """Replace the MatMul reading `site` (one reader, blocks along K) with MatMulNBits."""
    (matmul, _), = consumers(site)
    k, n = site.shape
    bits = 4 if qt.dtype in ("int4", "uint4") else 8
    block = qt.block_size
    blocks = k // block
    offset = _OFFSET[qt.dtype]
    unsigned = (qt.q.astype(np.int16) + offset).T.reshape(n, blocks, block)  # [N, blocks, block]
    inputs = [matmul.inputs[0],
              gs.Constant(names.new(f"{site.name}_nbits"), np.ascontiguousarray(_pack(unsigned, bits))),
              gs.Constant(names.new(f"{site.name}_scales"),
                          np.ascontiguousarray(qt.scale.astype(np.float32).reshape(blocks, n).T.ravel()))]
    if qt.zero_point is not None:
        zero = (qt.zero_point.astype(np.int16) + offset).reshape(blocks, n).T  # [N, blocks]
        packed = np.ascontiguousarray(_pack(zero, bits).ravel())
        inputs.append(gs.Constant(names.new(f"{site.name}_zero_points"), packed))
    output = matmul.outputs[0]
    matmul.outputs.clear()  # the MatMul goes dead; cleanup removes it
    node = gs.Node("MatMulNBits", name=names.new(f"{site.name}__MatMulNBits"), domain="com.microsoft",
                   attrs={"K": k, "N": n, "bits": bits, "block_size": block, "accuracy_level": 0},
                   inputs=inputs, outputs=[output])
    (graph, _), = readers_by_graph(site)  # one reader, so one graph
    graph.nodes.append(node)


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    """What com.microsoft MatMulNBits takes: a float32 2-D weight read by one MatMul as B, blocks
    of a power of two >= 16 along K (MatMulNBits is not a standard op)."""
    readers = consumers(site)
    block = scheme.block_size or 0
    if not (len(readers) == 1 and readers[0][0].op == "MatMul" and readers[0][1] == 1 and len(site.shape) == 2
            and site.onnx_dtype == onnx.TensorProto.FLOAT):
        return "not a float32 2-D weight read by one MatMul as B"
    if not (scheme.granularity == "block" and block >= 16 and block & (block - 1) == 0 and scheme.axis == 0):
        return "MatMulNBits takes blocks of a power of two >= 16 along K (axis 0)"
    return None


def _build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    build_matmul_nbits(site, qt, names)


LOWERING = Lowering("matmulnbits", "com.microsoft MatMulNBits: the weight stays 4/8-bit in the kernel", fits, _build,
                    packed_zero_points=True)
