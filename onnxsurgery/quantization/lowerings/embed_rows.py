"""The `embed_rows` lowering: a table whose rows are looked up by a reader the `gather` lowering
cannot take keeps its integer rows (8- or 4-bit); the rows each run needs are gathered and
dequantized first, as `gather` does for a Gather of the table itself. Two such readers:

1. The word table of onnxruntime's fused EmbedLayerNormalization (com.microsoft; inputs: token
   ids, segment ids, word table, ...). The op looks the rows up itself, so it gets the gathered
   rows as its table and their own positions as its ids:

   Before: ids -> EmbedLayerNormalization(ids, ..., W [vocab, hidden], ...)
   After:  Gather(Wq, ids) -> Cast -> Mul(Gather(scale, ids)) -> Reshape [B*S, hidden] = W'
           ids' = Reshape(Range(0, Size(ids)), Shape(ids))
           EmbedLayerNormalization(ids', ..., W', ...)

   ELN uses the token ids only to index the word table (positions come from the sequence index
   or position_ids, the mask from its own input), so the remapped ids give the same sums.

2. A table stored in a narrower float and read by Gather through a Cast to float32 (a bfloat16
   checkpoint's export: W_bf16 -> Cast -> Gather): the Gathers behind the Cast take the integer
   rows, dequantized straight to float32, and the Cast goes.

Why: DequantizeLinear before the reader dequantized the whole table at every run (all-MiniLM-L6-v2
fused, 30522x384: latency 2.3-3.3x, peak memory after a run 1.09x the fused original's; with
bfloat16 weights, --keep-quantized: 12.7x latency), and the arith chain folded two float copies at
load (1.40x with the rest of the model). Here the table stays integer in memory and each run
dequantizes only the rows its tokens read. 4-bit rows (--dtype int4) are packed two per byte and
split with BitShift, as `gather` does."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers, readers_by_graph
from ..nodes import Emitter, const
from ..options import Scheme
from ..rounding import Quantized
from .base import Lowering
from .gather import build_gathered
from .weight_readers import through_casts

READER, TABLE_INPUT = "EmbedLayerNormalization", 2
RANGE_OPSET = 11  # Range (the remapped ids); also uint8 BitShift, which splits 4-bit rows


def word_table(site: ConstantSite) -> bool:
    """Whether `site` is read only as the word table of EmbedLayerNormalization, in its own scope."""
    readers = consumers(site)
    return bool(readers) and len(site.shape) == 2 and site.onnx_dtype == onnx.TensorProto.FLOAT \
        and all(n.op == READER and i == TABLE_INPUT and n.inputs[0] is not site.value for n, i in readers) \
        and all(graph is site.scope.graph for graph, _ in readers_by_graph(site))


def gathers_behind_cast(site: ConstantSite) -> list[gs.Node] | None:
    """The Gathers (data input, along axis 0) that read `site` through Casts to float32 in its own
    graph (weight_readers.through_casts), or None where anything else reads it."""
    behind = through_casts(site)
    rank = len(site.shape)
    if not behind or not rank or not all(n.op == "Gather" and i == 0 and n.attrs.get("axis", 0) % rank == 0
                                         for n, i in behind):
        return None
    return [n for n, _ in behind]


def looked_up(site: ConstantSite) -> bool:
    """Whether `site` is a table this lowering takes: an EmbedLayerNormalization word table, or
    a table read by Gather through a Cast."""
    return word_table(site) or gathers_behind_cast(site) is not None


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    if not looked_up(site):
        return "not the float32 word table of EmbedLayerNormalization (input 2), nor a table read by Gather " \
               "through a Cast"
    if scheme.granularity != "tensor" and (scheme.granularity == "channel") != (scheme.axis == 0):
        return "its groups span rows (channels along axis 0, or blocks along axis 1, are needed)"
    if dtype in ("int4", "uint4") and int(np.prod(site.shape[1:])) % 2:
        return "4-bit rows are packed two values a byte: an even row length is needed"
    if opset < RANGE_OPSET:
        return f"needs opset {RANGE_OPSET} (Range, BitShift)"
    return None


def build_embed_rows(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    behind = gathers_behind_cast(site)
    if behind is not None:  # the Gathers take float32 rows; the Cast and the float table go dead
        build_gathered(site, qt, names, gathers=behind, out_type=onnx.TensorProto.FLOAT)
        return
    graph, base, hidden = site.scope.graph, site.name, site.shape[1]
    emit = Emitter(graph, names, base)
    readers = [n for n, _ in consumers(site)]
    rows = [gs.Variable(names.new(f"{base}_rows"), dtype=np.float32) for _ in readers]
    # a Gather per reader, never in the graph: build_gathered makes its output from the integer rows
    lookups = [gs.Node("Gather", name=names.new(f"{base}__lookup"), inputs=[site.value, node.inputs[0]],
                       outputs=[out]) for node, out in zip(readers, rows)]
    build_gathered(site, qt, names, gathers=lookups)
    for node, lookup, gathered in zip(readers, lookups, rows):
        ids = lookup.inputs[1]
        lookup.inputs.clear()
        ids_type = ids.dtype if ids.dtype is not None else np.int32
        table = emit("Reshape", [gathered, const(names, f"{base}_rows_shape", np.array([-1, hidden], np.int64))])
        count = emit("Cast", [emit("Size", [ids], dtype=np.int64)], dtype=ids_type, to=_onnx_int(ids_type))
        positions = emit("Range", [const(names, f"{base}_zero", np.array(0, ids_type)), count,
                                   const(names, f"{base}_one", np.array(1, ids_type))], dtype=ids_type)
        node.inputs[0] = emit("Reshape", [positions, emit("Shape", [ids], dtype=np.int64)], dtype=ids_type)
        node.inputs[TABLE_INPUT] = table


def _onnx_int(dtype) -> int:
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


LOWERING = Lowering("embed_rows", "a table looked up by EmbedLayerNormalization, or by Gather through a Cast: "
                    "integer rows gathered, then dequantized", fits, build_embed_rows,
                    min_opset=lambda dtype, granularity: RANGE_OPSET, float_scales=False)
