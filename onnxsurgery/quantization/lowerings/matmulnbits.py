"""The `matmulnbits` lowering (`--target onnxruntime`): a MatMul weight becomes onnxruntime's
com.microsoft MatMulNBits, which keeps the weight 4- or 8-bit in memory and dequantizes it
block by block inside the kernel.

Before: X -> MatMul(X, W[K, N]) -> Y     (or Gemm(X, W[K, N] or, with transB, W[N, K], C[N]))
After:  X -> MatMulNBits(X, B, scales[, zero_points][, bias = C]; K, N, bits, block_size, accuracy_level=4) -> Y

A weight read by several MatMuls (ALBERT's shared layers, a merged decoder's weights read in
both branches of its If) is stored once: every reader becomes its own MatMulNBits over the same
B, scales and zero points, in the graph that held the reader. DequantizeLinear -> MatMul fuses
for one reader only, so this is the form that keeps such a weight 4-bit and fast (ALBERT-shaped
sample, 12 readers per weight: figures in docs/quantization.md).

Layout (onnxruntime's contrib op spec): B is uint8 [N, K / block, block * bits / 8], each
column's blocks in a row, 4-bit values two per byte, the first in the low nibble; scales float
[N * K / block]; zero points uint8 [N * ceil(blocks * bits / 8)], packed the same way (absent:
2^(bits - 1)). Signed integers are stored with that offset, so they need no zero point when
symmetric. ACCURACY_LEVEL below: how the kernel computes.

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

NBITS_OFFSET = {"int8": 128, "uint8": 0, "int4": 8, "uint4": 0}
# accuracy_level 4: the kernel quantizes each block of the activations to int8 and multiplies in
# integers, as onnxruntime-genai's builder export and onnxruntime's DequantizeLinear -> MatMul
# fusion do. Level 0 (float arithmetic, the outputs of dequantizing first) ran 1.06-1.14x the
# float model's latency against 0.80-0.86x (ALBERT-base, MiniLM; rel L2 0.7298 -> 0.7275, 0.2223
# -> 0.2245 on the bench's inputs) and decoded SmolLM2-135M 1.45-1.75x slower than the builder's
# int4 export; 8-bit at level 0 ran 13x slower than the float MatMul at one token.
ACCURACY_LEVEL = 4


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned values along the last axis, two per byte (low nibble first) when 4-bit."""
    values = values.astype(np.uint8)
    if bits == 8:
        return values
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros(values.shape[:-1] + (1,), np.uint8)], axis=-1)
    return values[..., 0::2] | (values[..., 1::2] << 4)


def reduction_axis(node: gs.Node) -> int | None:
    """The axis of B that `node` (reading it as input 1) reduces over, where a MatMulNBits can
    stand in for the node, else None: MatMul (0); Gemm with transA 0, alpha and beta 1 and a C,
    if any, that is a constant of N values (it becomes MatMulNBits's bias): 0, or 1 with transB."""
    if node.op == "MatMul":
        return 0
    if node.op != "Gemm" or node.attrs.get("transA", 0) or node.attrs.get("alpha", 1.0) != 1.0 \
            or node.attrs.get("beta", 1.0) != 1.0:
        return None
    if len(node.inputs) > 2 and node.inputs[2].name:
        c = node.inputs[2]
        if not isinstance(c, gs.Constant) or len(c.shape) > 2 or (len(c.shape) == 2 and c.shape[0] != 1):
            return None
    return 1 if node.attrs.get("transB", 0) else 0


def _bias(node: gs.Node, n: int, names: NameAllocator) -> gs.Tensor | None:
    """A Gemm's C as MatMulNBits's bias [N] (reduction_axis checked that it is a constant row)."""
    if node.op != "Gemm" or len(node.inputs) < 3 or not node.inputs[2].name:
        return None
    c = node.inputs[2]
    if tuple(c.shape) == (n,):
        return c
    row = np.broadcast_to(np.asarray(c.values).reshape(-1), (n,))
    return gs.Constant(names.new(f"{c.name}_bias"), np.ascontiguousarray(row))


def build_matmul_nbits(site: ConstantSite, qt: Quantized, names: NameAllocator) -> None:
    """Replace every MatMul/Gemm reading `site` (as B, blocks along K) with a MatMulNBits, all
    of them reading one packed weight."""
    transposed = qt.axis == 1  # Gemm transB: the weight is [N, K] already, MatMulNBits's order
    n, k = site.shape if transposed else site.shape[::-1]
    bits = 4 if qt.dtype in ("int4", "uint4") else 8
    block = qt.block_size
    blocks = k // block
    offset = NBITS_OFFSET[qt.dtype]

    def by_column(a: np.ndarray) -> np.ndarray:  # [K or blocks, N] -> [N, ...]; [N, ...] as it is
        return a if transposed else a.T

    grid = (n, blocks) if transposed else (blocks, n)  # how scales and zero points are held
    unsigned = by_column(qt.q.astype(np.int16) + offset).reshape(n, blocks, block)
    inputs = [gs.Constant(names.new(f"{site.name}_nbits"), np.ascontiguousarray(pack_bits(unsigned, bits))),
              gs.Constant(names.new(f"{site.name}_scales"),
                          np.ascontiguousarray(by_column(qt.scale.astype(np.float32).reshape(grid)).ravel()))]
    if qt.zero_point is not None:
        zero = pack_bits(by_column((qt.zero_point.astype(np.int16) + offset).reshape(grid)), bits)
        inputs.append(gs.Constant(names.new(f"{site.name}_zero_points"), np.ascontiguousarray(zero.ravel())))
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block, "accuracy_level": ACCURACY_LEVEL}
    for graph, readers in readers_by_graph(site):  # a node goes into the graph of the reader it replaces
        for reader, _ in readers:
            extra = []
            bias = _bias(reader, n, names)
            if bias is not None:  # zero points and g_idx stay empty where absent
                extra = [*([gs.Variable.empty()] * (4 - len(inputs))), bias]
            output = reader.outputs[0]
            reader.outputs.clear()  # the reader goes dead; cleanup removes it
            graph.nodes.append(gs.Node("MatMulNBits", name=names.new(f"{site.name}__MatMulNBits"),
                                       domain="com.microsoft", attrs=dict(attrs),
                                       inputs=[reader.inputs[0], *inputs, *extra], outputs=[output]))


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    """What com.microsoft MatMulNBits takes: a float32 2-D weight read only as B by MatMuls or
    plain Gemms (reduction_axis), one MatMulNBits each, all reducing over the same axis, in
    blocks of a power of two >= 16 along it (MatMulNBits is not a standard op)."""
    readers = consumers(site)
    block = scheme.block_size or 0
    axes = {reduction_axis(node) if index == 1 else None for node, index in readers}
    if not (readers and len(axes) == 1 and None not in axes and len(site.shape) == 2
            and site.onnx_dtype == onnx.TensorProto.FLOAT):
        return "not a float32 2-D weight read only as B by MatMuls or plain Gemms that agree on its layout"
    if not (scheme.granularity == "block" and block >= 16 and block & (block - 1) == 0 and scheme.axis in axes):
        return "MatMulNBits takes blocks of a power of two >= 16 along K"
    return None


def _build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    build_matmul_nbits(site, qt, names)


LOWERING = Lowering("matmulnbits", "com.microsoft MatMulNBits: the weight stays 4/8-bit in the kernel", fits, _build,
                    packed_zero_points=True)
