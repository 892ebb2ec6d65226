"""The `tied_nbits` lowering (onnxruntime only): a token table that is also the lm_head (tied.py's
layouts) stored once in MatMulNBits' layout, 4-bit in blocks along the hidden axis, and read by
two com.microsoft ops that share its initializers, as onnxruntime-genai's builder writes it:

Before: E [V, H] -> Gather(ids) -> ...     and  E -> Transpose -> MatMul(h, E^T) -> logits
   (or, mirrored: T = E^T [H, V] -> MatMul(h, T) -> logits, T -> Transpose -> Gather(ids))
After:  B [V, H / block, block / 2] (uint8), scales [V, H / block] (float32)[, zero points]
        MatMulNBits(h, B, scales; K=H, N=V) -> logits
        B -> Reshape [V, H / 2] -> GatherBlockQuantized(., ids, scales; quantize_axis 1) -> ...

A row of E is a column of the lm_head's B, so MatMulNBits' blocks along K are the Gather's
blocks along a row: one set of integers, scales and zero points serves both. Unlike `tied` (int8
rows, the lm_head a float copy folded at load) nothing weight-sized is float at run time, and
unlike DequantizeLinear (the whole table dequantized and transposed at every step, 5.1x the float
model's decode on SmolLM2-135M) each op reads the integers in its kernel. GatherBlockQuantized
takes its data 2-D with scales of the same rank, MatMulNBits 3-D: the Reshape of the integers
is folded at load, as in the builder's export.

accuracy_level 4, as in matmulnbits.py: the hidden state is quantized to int8 per block inside
the kernel. At 8 bits onnxruntime 1.32's float kernel (level 0) is unusable (a 576x49152 lm_head
at one token: 1010 ms against 3 ms); SmolLM2-135M's logits at level 4: relative L2 0.058 against
the float model, 0.059 with the `tied` int8 table.
Limits: float32 2-D table, blocks of a power of two >= 16 along the hidden axis, 4 or 8 bits;
a Gemm lm_head only with alpha 1 and no C. Not standard ops: onnxruntime runs the result.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers, node_graphs
from ..nodes import Emitter, const
from ..options import Scheme
from ..rounding import Quantized
from .base import Lowering
from .matmulnbits import NBITS_OFFSET, ACCURACY_LEVEL, pack_bits
from .tied import lm_heads, mirrored_layout, not_a_table


def tied_readers(site: ConstantSite) -> tuple[list[gs.Node], list[gs.Node], int] | None:
    """(Gathers of the table's rows, lm_head MatMul/Gemm nodes, hidden axis of the stored table)
    for a table in one of tied.py's layouts, else None. The Gathers read the table itself (plain)
    or its Transpose (mirrored); the heads read it as B directly, through a Transpose or as Gemm's
    transposed B."""
    if len(site.shape) != 2:
        return None
    mirrored = mirrored_layout(site)
    if mirrored:
        heads, transposes = mirrored
        return [g for t in transposes for g in t.outputs[0].outputs], heads, 0
    readers = consumers(site)
    gathers = [n for n, i in readers if n.op == "Gather" and i == 0 and n.attrs.get("axis", 0) % 2 == 0]
    found = lm_heads(site)
    if not (gathers and found and len(gathers) + len(found) == len(readers)):
        return None
    heads = [r for node, _ in found for r in ([node] if node.op == "Gemm" else node.outputs[0].outputs)]
    return gathers, heads, 1


def hidden_axis(site: ConstantSite) -> int | None:
    """The stored table's hidden axis (where MatMulNBits and GatherBlockQuantized both take their
    blocks), or None when `site` is not a tied table."""
    readers = tied_readers(site)
    return readers[2] if readers else None


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    if reason := not_a_table(site):
        return reason
    readers = tied_readers(site)
    if readers is None:
        return "not a table read by Gather and by an lm_head (Transpose -> MatMul, or Gemm with transB)"
    _, heads, axis = readers
    if any(h.op == "Gemm" and (h.attrs.get("alpha", 1.0) != 1.0 or len(h.inputs) > 2) for h in heads):
        return "a Gemm lm_head with alpha or C: MatMulNBits takes neither"
    block = scheme.block_size or 0
    if not (scheme.granularity == "block" and scheme.axis == axis and block >= 16 and block & (block - 1) == 0):
        return f"MatMulNBits and GatherBlockQuantized take blocks of a power of two >= 16 along the hidden axis " \
               f"(axis {axis})"
    if dtype not in NBITS_OFFSET:
        return f"{dtype}: 4 or 8 bits"
    return None


def build_tied_nbits(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    gathers, heads, axis = tied_readers(site)
    q, scale, zero = qt.q, qt.scale, qt.zero_point
    if axis == 0:  # mirrored: stored [H, V], blocks [H / block, V]; rows of the vocabulary first
        q, scale = q.T, scale.T
        zero = zero.T if zero is not None else None
    vocab, hidden = q.shape
    bits = 8 if qt.dtype in ("int8", "uint8") else 4
    block, offset = qt.block_size, NBITS_OFFSET[qt.dtype]
    blocks = hidden // block
    unsigned = (q.astype(np.int16) + offset).reshape(vocab, blocks, block)
    table = const(names, f"{site.name}_nbits", pack_bits(unsigned, bits))  # [V, blocks, block * bits / 8]
    scales = const(names, f"{site.name}_scales", scale.astype(np.float32).reshape(vocab, blocks))
    zeros = None
    if zero is not None:  # [V, ceil(blocks * bits / 8)], packed like the integers
        zeros = const(names, f"{site.name}_zero_points", pack_bits(zero.astype(np.int16) + offset, bits))
    graphs = node_graphs(site)  # each reader's replacement goes into the reader's graph
    emit = Emitter(site.scope.graph, names, site.name)
    attrs = {"K": hidden, "N": vocab, "bits": bits, "block_size": block, "accuracy_level": ACCURACY_LEVEL}
    for head in heads:
        output = head.outputs[0]
        head.outputs.clear()  # the MatMul (Gemm) goes dead; cleanup removes it and the Transpose
        inputs = [head.inputs[0], table, scales] + ([zeros] if zeros is not None else [])
        graphs[id(head)].nodes.append(gs.Node("MatMulNBits", name=names.new(f"{site.name}__MatMulNBits"),
                                              domain="com.microsoft", attrs=attrs, inputs=inputs, outputs=[output]))
    rows = emit("Reshape", [table, const(names, f"{site.name}_rows_shape", np.array([vocab, -1], np.int64))],
                dtype=np.uint8, shape=[vocab, hidden * bits // 8])
    for gather in gathers:
        output = gather.outputs[0]
        gather.outputs.clear()
        inputs = [rows, gather.inputs[1], scales] + ([zeros] if zeros is not None else [])
        graphs[id(gather)].nodes.append(gs.Node(
            "GatherBlockQuantized", name=names.new(f"{site.name}__GatherBlockQuantized"), domain="com.microsoft",
            inputs=inputs, outputs=[output],
            attrs={"bits": bits, "block_size": block, "gather_axis": 0, "quantize_axis": 1}))


LOWERING = Lowering("tied_nbits", "a table read by Gather and the lm_head, stored once in MatMulNBits layout: "
                    "MatMulNBits and GatherBlockQuantized share it (onnxruntime only)",
                    fits, build_tied_nbits, packed_zero_points=True)
