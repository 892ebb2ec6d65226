"""How a weight's readers hold it: which axis is its output channel and which its blocks run
along (the reduction axis), per reader op, for quantization's scales and blocks."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import ConstantSite, consumers


def axes_read(site: ConstantSite) -> set[tuple[int, int]]:
    """(channel axis, block axis) as each consumer reads the weight: MatMul B per output column
    with blocks along the reduction axis, Gemm and FusedMatMul honouring transB, Attention's
    packed QKV weight as MatMul B, Conv per output channel with
    blocks along the input channels, ConvTranspose per output channel, LSTM/GRU/RNN W and R per
    gate row with blocks along the inputs, Gather per row; (0, last)
    for any other reader."""
    rank = len(site.shape)
    default = (0, rank - 1)
    rules = set()
    for node, idx in [read for reader in consumers(site) for read in _behind_cast(*reader)]:
        if node.op == "MatMul" and idx == 1 and rank >= 2:
            rules.add((rank - 1, rank - 2))
        elif node.op in ("Gemm", "FusedMatMul") and idx == 1 and rank == 2:
            rules.add((0, 1) if node.attrs.get("transB", 0) else (1, 0))
        elif node.op == "Attention" and idx == 1 and rank == 2:  # com.microsoft: [hidden, 3 * hidden]
            rules.add((1, 0))
        elif node.op == "Conv" and idx == 1 and rank >= 2:
            rules.add((0, 1))
        elif node.op == "ConvTranspose" and idx == 1 and rank >= 2:
            rules.add((1, 0))
        elif node.op in ("LSTM", "GRU", "RNN") and idx in (1, 2) and rank == 3:
            rules.add((1, 2))  # [directions, gates * hidden, inputs]: per gate row, blocks along inputs
        elif node.op == "Gather" and idx == 0:
            axis = node.attrs.get("axis", 0) % rank
            rules.add((axis, rank - 1 if axis != rank - 1 else 0))
        else:
            rules.add(default)
    return rules


def _behind_cast(node: gs.Node, index: int) -> list[tuple[gs.Node, int]]:
    """The readers behind a Cast to float32 (a bfloat16 weight's Cast: its MatMul decides the
    axes; blocks along the output axis kept MiniLM's bfloat16 --keep-quantized from fusing into
    MatMulNBits), else the reader itself."""
    if node.op != "Cast" or node.attrs.get("to") != onnx.TensorProto.FLOAT or not node.outputs:
        return [(node, index)]
    out = node.outputs[0]
    return [(n, i) for n in out.outputs for i, t in enumerate(n.inputs) if t is out] or [(node, index)]


def choose_axes(site: ConstantSite) -> tuple[int, int]:
    """(channel axis, block axis) for a weight: its consumers' if they agree, else (0, last)."""
    rules = axes_read(site)
    return rules.pop() if len(rules) == 1 else (0, len(site.shape) - 1)
