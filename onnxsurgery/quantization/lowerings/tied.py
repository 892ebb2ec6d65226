"""The `tied` lowering: one table read by a Gather (the token embedding) and by the lm_head (a
MatMul through a Transpose, or a Gemm with transB), as small language models store it. One int8
table with one scale per row serves both, and neither path holds it in float at run time:

Before: E [V, H] -> Gather(ids) -> ...            and  E -> Transpose -> MatMul(h, E^T) -> logits
After:  Eq (int8), s [V] -> Gather rows, Cast, Mul (gather.py, only the rows looked up)
        Eq -> Transpose -> Cast -> MatMul(h, .) -> Mul(s along the vocabulary) -> logits

A row of E is an output channel of the lm_head, so its scale commutes with the MatMul (as in
scaled.py). onnxruntime folds Transpose -> Cast at load into one float copy of the table, what
the float original holds for its own transposed read (transposed in int8 first, the fold's peak
holds a quarter-size copy, not a float one); the Gather path dequantizes the looked-up rows at
run time. Without this, the table's one lowering had to serve both readers: a Cast ->
Mul chain folded into float copies (a 135M decoder at 1.35x the float model's memory), or, kept
quantized, the whole table dequantized and transposed at every decoding step.

Readers may sit in subgraphs (a merged decoder reads its table in both branches of an If): the
nodes replacing each reader go into the reader's own graph.

Limits: int8, symmetric, per row; a 2-D table.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers, node_graphs
from ..nodes import Emitter, int_tensor
from ..options import Scheme
from ..rounding import Quantized
from .base import Lowering
from .gather import build_gathered
from .scaled import divide_bias, scale_output


def lm_heads(site: ConstantSite) -> list[tuple[gs.Node, int]] | None:
    """The (MatMul or Gemm, input index) reading the table as the lm_head, through a Transpose
    or as Gemm's transposed B; None when a non-Gather reader is neither."""
    heads = []
    for node, index in consumers(site):
        if node.op == "Gather":
            continue
        if node.op == "Gemm" and index == 1 and node.attrs.get("transB", 0) and not node.attrs.get("transA", 0):
            heads.append((node, index))
        elif node.op == "Transpose" and list(node.attrs.get("perm", [1, 0])) == [1, 0] and len(node.outputs) == 1:
            readers = list(node.outputs[0].outputs)
            if not readers or not all(r.op == "MatMul" and r.inputs[1] is node.outputs[0] for r in readers):
                return None
            heads.append((node, index))
        else:
            return None
    return heads


def mirrored_layout(site: ConstantSite) -> tuple[list[gs.Node], list[gs.Node]] | None:
    """onnxruntime-genai's layout: the table stored [hidden, vocab] as the lm_head MatMul's B, the
    token embedding reading it through a Transpose then a Gather. (lm_heads, transposes) or None."""
    heads, transposes = [], []
    for node, index in consumers(site):
        if node.op == "MatMul" and index == 1:
            heads.append(node)
        elif _transpose_into_gathers(node):
            transposes.append(node)
        else:
            return None
    return (heads, transposes) if heads and transposes else None


def _transpose_into_gathers(node: gs.Node) -> bool:
    """A 2-D Transpose whose output only Gathers read, as their data along axis 0."""
    if node.op != "Transpose" or list(node.attrs.get("perm", [1, 0])) != [1, 0] or len(node.outputs) != 1:
        return False
    out = node.outputs[0]
    return bool(out.outputs) and all(g.op == "Gather" and g.inputs[0] is out and g.attrs.get("axis", 0) % 2 == 0
                                     for g in out.outputs)


def scheme_for(site: ConstantSite) -> Scheme:
    """One scale per vocabulary entry: a row of the table, or a column in the mirrored layout."""
    return Scheme("channel", 1 if len(site.shape) == 2 and mirrored_layout(site) else 0)


def not_a_table(site: ConstantSite) -> str | None:
    """Why `site` cannot be a tied table whoever reads it (this lowering's and tied_nbits')."""
    if len(site.shape) != 2 or site.onnx_dtype != onnx.TensorProto.FLOAT:
        return "not a float32 2-D table"
    return None


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    if reason := not_a_table(site):
        return reason
    readers = consumers(site)
    gathers = [n for n, i in readers if n.op == "Gather" and i == 0 and n.attrs.get("axis", 0) % 2 == 0]
    heads = lm_heads(site)
    plain = bool(gathers and heads and len(gathers) + len(heads) == len(readers))
    if not plain and mirrored_layout(site) is None:
        return "not a table read by Gather and by an lm_head (Transpose -> MatMul, or Gemm with transB)"
    if dtype != "int8" or scheme != scheme_for(site):
        return "tied stores int8 with one scale per vocabulary entry"
    return None


def build_tied(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    mirrored = mirrored_layout(site)
    if mirrored:
        _build_mirrored(site, qt, names, *mirrored)
        return
    heads = lm_heads(site)
    gathers = [n for n, _ in consumers(site) if n.op == "Gather"]
    table = build_gathered(site, qt, names, gathers)
    scale = np.where(qt.scale == 0, 1, qt.scale).astype(np.float32).ravel()  # all-zero rows: q is 0 there
    graphs = node_graphs(site)
    factor = gs.Constant(names.new(f"{site.name}_row_scale"), scale)

    def to_float(graph: gs.Graph, tensor: gs.Tensor, shape) -> gs.Variable:
        out = gs.Variable(names.new(f"{site.name}__cast"), dtype=np.float32, shape=shape)
        graph.nodes.append(gs.Node("Cast", name=names.new(f"{site.name}__Cast"),
                                   attrs={"to": onnx.TensorProto.FLOAT}, inputs=[tensor], outputs=[out]))
        return out

    for node, index in heads:
        graph = graphs[id(node)]
        if node.op == "Gemm":
            node.inputs[index] = to_float(graph, table, list(site.shape))
            readers = [node]
        else:  # Transpose the int8 table, then Cast: folding at load holds a quarter-size copy, not
            # a float one, while it makes the float transposed table (the float model holds two)
            transposed = node.outputs[0]
            node.inputs[0] = table
            transposed.dtype = table.values.dtype
            weight = to_float(graph, transposed, transposed.shape)
            readers = list(transposed.outputs)
            for reader in readers:
                if reader.op != "Cast":
                    reader.inputs[1] = weight
            readers = [r for r in readers if r.op != "Cast"]
        for reader in readers:
            divide_bias(graphs[id(reader)], reader, scale, names)
            scale_output(graphs[id(reader)], reader, scale, names, site.name, lambda suffix, array: factor)


LOWERING = Lowering("tied", "a table read by Gather and the lm_head: int8 rows for both, no float copy at run time",
                    fits, build_tied, float_scales=False, float_copies=lambda granularity, zero_points: 1)


def _build_mirrored(site: ConstantSite, qt: Quantized, names: NameAllocator, heads: list[gs.Node],
                    transposes: list[gs.Node]) -> None:
    """Eq [hidden, vocab] (int8, a scale per column): the lm_head reads Cast(Eq) with the scales
    after it; each Transpose reads Eq itself (folded at load into an int8 [vocab, hidden] copy),
    its Gathers take int8 rows, then Cast and the gathered scales."""
    graphs = node_graphs(site)
    emit = Emitter(site.scope.graph, names, site.name)
    table = int_tensor(names, f"{site.name}_q", qt.q, qt.dtype)
    scale = np.where(qt.scale == 0, 1, qt.scale).astype(np.float32).ravel()
    factor = gs.Constant(names.new(f"{site.name}_col_scale"), scale)
    rows = gs.Constant(names.new(f"{site.name}_row_scale"), scale.reshape(-1, 1))  # gathered: [*ids, 1]
    weight = emit("Cast", [table], shape=list(site.shape), to=onnx.TensorProto.FLOAT)
    for head in heads:
        head.inputs[1] = weight
        scale_output(graphs[id(head)], head, scale, names, site.name, lambda suffix, array: factor)
    for transpose in transposes:
        transpose.inputs[0] = table
        transpose.outputs[0].dtype = np.int8
        for gather in list(transpose.outputs[0].outputs):
            beside = Emitter(graphs[id(gather)], names, site.name)  # in the Gather's own graph
            (output,) = list(gather.outputs)
            picked = gs.Variable(names.new(f"{output.name}_int8"), dtype=np.int8)
            gather.outputs[0] = picked
            scales = beside("Gather", [rows, gather.inputs[1]], axis=0)
            beside("Mul", [beside("Cast", [picked], to=onnx.TensorProto.FLOAT), scales])
            beside.graph.nodes[-1].outputs[0] = output  # the Mul now produces what the Gather did
