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

Limits: int8, symmetric, per row; a 2-D table whose readers are all in its own graph.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers, readers_by_graph
from ..options import Scheme
from ..rounding import Quantized
from .base import Lowering
from .gather import build_gathered
from .scaled import _divide_bias, _scale_output


def _lm_heads(site: ConstantSite) -> list[tuple[gs.Node, int]] | None:
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


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    if len(site.shape) != 2 or site.onnx_dtype != onnx.TensorProto.FLOAT:
        return "not a float32 2-D table"
    readers = consumers(site)
    gathers = [n for n, i in readers if n.op == "Gather" and i == 0 and n.attrs.get("axis", 0) % 2 == 0]
    heads = _lm_heads(site)
    if not gathers or not heads or len(gathers) + len(heads) != len(readers):
        return "not a table read by Gather and by an lm_head (Transpose -> MatMul, or Gemm with transB)"
    if not all(graph is site.scope.graph for graph, _ in readers_by_graph(site)):
        return "read from another graph scope than its own"
    if dtype != "int8" or scheme.granularity != "channel" or scheme.axis != 0:
        return "tied stores int8 with one scale per row"
    return None


def build_tied(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    heads = _lm_heads(site)
    gathers = [n for n, _ in consumers(site) if n.op == "Gather"]
    table = build_gathered(site, qt, names, gathers)
    scale = np.where(qt.scale == 0, 1, qt.scale).astype(np.float32).ravel()  # all-zero rows: q is 0 there
    graph = site.scope.graph
    factor = gs.Constant(names.new(f"{site.name}_row_scale"), scale)

    def to_float(tensor: gs.Tensor, shape) -> gs.Variable:
        out = gs.Variable(names.new(f"{site.name}__cast"), dtype=np.float32, shape=shape)
        graph.nodes.append(gs.Node("Cast", name=names.new(f"{site.name}__Cast"),
                                   attrs={"to": onnx.TensorProto.FLOAT}, inputs=[tensor], outputs=[out]))
        return out

    for node, index in heads:
        if node.op == "Gemm":
            node.inputs[index] = to_float(table, list(site.shape))
            readers = [node]
        else:  # Transpose the int8 table, then Cast: folding at load holds a quarter-size copy, not
            # a float one, while it makes the float transposed table (the float model holds two)
            transposed = node.outputs[0]
            node.inputs[0] = table
            transposed.dtype = table.values.dtype
            weight = to_float(transposed, transposed.shape)
            readers = list(transposed.outputs)
            for reader in readers:
                if reader.op != "Cast":
                    reader.inputs[1] = weight
            readers = [r for r in readers if r.op != "Cast"]
        for reader in readers:
            _divide_bias(graph, reader, scale, names)
            _scale_output(graph, reader, scale, names, site.name, lambda suffix, array: factor)


LOWERING = Lowering("tied", "a table read by Gather and the lm_head: int8 rows for both, no float copy at run time",
                    fits, build_tied, float_scales=False, float_copies=lambda granularity, zero_points: 1)
