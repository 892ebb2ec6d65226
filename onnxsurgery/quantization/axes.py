"""How a weight's readers hold it: which axis is its output channel and which its blocks run
along (the reduction axis), per reader op, for quantization's scales and blocks."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import ConstantSite, consumers
from .options import Scheme


def axes_read(site: ConstantSite) -> set[tuple[int, int]]:
    """(channel axis, block axis) as each consumer reads the weight: MatMul B per output column
    with blocks along the reduction axis, Gemm and FusedMatMul honouring transB, Attention's
    packed QKV weight as MatMul B, Conv per output channel with
    blocks along the input channels, ConvTranspose per output channel, LSTM/GRU/RNN W and R per
    gate row with blocks along the inputs, Gather per row; (0, last)
    for any other reader (an Einsum's too: int4 blocks along its output axis measured better than
    along the summed one, einsum_scheme)."""
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


def einsum_axes(node: gs.Node, index: int, shape) -> tuple[int, int, tuple[int, ...]] | None:
    """(channel axis, block axis, group axes) of the weight at input `index` of an Einsum, from
    its equation: the channel is the weight's one subscript that the output keeps and no other
    operand has (`h` of DeepFilterNet's grouped linear `btgi,gih->btgh`, `e` of a BERT output
    projection `abcd,cde->abe`), the blocks run along its longest summed subscript (`i`), and
    a group axis is one the output keeps that another operand has too (`g`: each group's
    channels are output channels of their own). None where the equation has no such channel
    (an ellipsis, two or no kept subscripts, nothing summed)."""
    equation = str(node.attrs.get("equation", "")).replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if not arrow or "." in equation or index >= len(terms) or len(terms[index]) != len(shape):
        return None
    term, others = terms[index], "".join(t for i, t in enumerate(terms) if i != index)
    kept = [a for a, s in enumerate(term) if s in output and s not in others]
    summed = [a for a, s in enumerate(term) if s not in output]
    if len(kept) != 1 or not summed:
        return None
    block = max(summed, key=lambda a: (shape[a], a))
    return kept[0], block, tuple(a for a, s in enumerate(term) if s in output and s in others)


def einsum_scheme(site: ConstantSite) -> Scheme | None:
    """The int8 lean form's scales of an Einsum weight (every reader an Einsum that gives it the
    same einsum_axes), else None: per its channel axis (`e` of `abcd,cde->abe`), and for a grouped
    one (`gih`: one summed axis, a group axis or more) a scale per group and channel, [g, 1, h],
    as a block the length of the summed axis. The first axis (what (0, last) gives) is a BERT
    projection's 8 heads, a grouped linear's groups with 16 channels under each scale:
    DeepFilterNet3's df_fc_emb (32x96x16) report set's worst 0.0310 -> 0.0211, g2p_id_bert's
    tune set's better on 11 of 13 paired draws (ahead18, docs/benchmarks.md). Not int4's blocks:
    along the summed axis dfn3_encoder's tune set went 0.166 -> 0.307, g2p_id_bert's 0.151 -> 0.164."""
    readers = [read for reader in consumers(site) for read in _behind_cast(*reader)]
    found = {einsum_axes(node, idx, site.shape) if node.op == "Einsum" else None for node, idx in readers}
    if len(found) != 1 or None in found:
        return None
    channel, block, groups = found.pop()
    if not groups:
        return Scheme("channel", channel)
    summed = [a for a in range(len(site.shape)) if a != channel and a not in groups]
    return Scheme("block", block, int(site.shape[block])) if summed == [block] else None


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
