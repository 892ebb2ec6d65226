"""The `gather` lowering: an embedding table read only by Gather keeps its integer rows; each
Gather takes the integer rows (and their scales and zero points) first, and only those are
dequantized, at run time. The table stays 8- or 4-bit in the session instead of being folded
into a float copy, and the values are bit-identical: the same (q - zp) * scale per element."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers, node_graphs
from ..nodes import Emitter, broadcast_shape, const, int_tensor, nibble_offset, split_nibbles, blocked_shape, \
    zero_to_subtract
from ..options import FLOAT_TYPES
from ..options import Scheme
from ..packing import pack_halves
from ..rounding import Quantized
from .base import Lowering

def build_gathered(site: ConstantSite, qt: Quantized, names: NameAllocator,
                   gathers: list[gs.Node] | None = None, out_type: int | None = None) -> gs.Constant:
    """Replace each Gather of the table with: Gather of the integer rows (4-bit: packed rows,
    then split), of the zero points and of the scales by the same indices, then Cast -> [Sub]
    -> Mul [-> Reshape] [-> Cast] on the gathered rows only. Zero points and scales keep a
    leading row axis (per tensor they are scalars, not gathered), so the gathered ones
    broadcast against the gathered integers. `gathers`: those readers only (default: every
    reader, all Gathers); `out_type`: the rows' type (default: the table's own). Returns the
    stored integer table (the `tied` lowering reads it too)."""
    base, shape = site.name, list(site.shape)
    view = broadcast_shape(qt, shape)
    work_shape = blocked_shape(qt, shape)
    four_bit = qt.dtype in ("int4", "uint4")
    if four_bit:  # [rows, row / 2] bytes
        # int8 -8..7 plus 8, as bytes: 0..15 (uint8 wraps), without an int16 copy of the table
        rows = np.add(qt.q.view(np.uint8), np.uint8(nibble_offset(qt))).reshape(shape[0], -1)
        table = const(names, f"{base}_q4", pack_halves(rows))
    else:
        table = int_tensor(names, f"{base}_q", qt.q.reshape(work_shape), qt.dtype)
    scale = const(names, f"{base}_scale", qt.scale.reshape(view))
    zero = zero_to_subtract(qt, view, names, base)
    graphs = node_graphs(site)  # each Gather's nodes go into its own graph (an If branch's, say)

    def take(emit: Emitter, tensor: gs.Constant, indices: gs.Tensor) -> gs.Tensor:
        return tensor if not view else emit("Gather", [tensor, indices], dtype=tensor.values.dtype, axis=0)

    def indexed_shape(emit: Emitter, indices: gs.Tensor, dims: list[int]) -> gs.Variable:  # [*indices.shape, *dims]
        tail = const(names, f"{base}_dims", np.array(dims, np.int64))
        return emit("Concat", [emit("Shape", [indices], dtype=np.int64), tail], dtype=np.int64, axis=0)

    for gather in gathers if gathers is not None else [node for node, _ in consumers(site)]:
        # a stand-in Gather that no graph holds (embed_rows') puts its nodes in the table's graph
        emit = Emitter(graphs.get(id(gather), site.scope.graph), names, base)
        indices, (output,) = gather.inputs[1], list(gather.outputs)
        q = emit("Gather", [table, indices], dtype=table.values.dtype, axis=0)
        if four_bit:
            q = emit("Concat", list(split_nibbles(q, emit, names, base)), dtype=np.uint8, axis=-1)
            if len(work_shape) > 2:
                q = emit("Reshape", [q, indexed_shape(emit, indices, work_shape[1:])], dtype=np.uint8)
        x = emit("Cast", [q], to=onnx.TensorProto.FLOAT)
        if zero is not None:  # integer zero points are gathered; int4's float offset is a scalar
            as_float = zero.values.dtype == np.float32
            x = emit("Sub", [x, zero if as_float else emit("Cast", [take(emit, zero, indices)],
                                                              to=onnx.TensorProto.FLOAT)])
        scales = take(emit, scale, indices)
        if qt.scale.dtype != np.float32:
            scales = emit("Cast", [scales], to=onnx.TensorProto.FLOAT)
        x = emit("Mul", [x, scales])
        if qt.granularity == "block":  # [*indices, blocks, block] -> [*indices, row]
            x = emit("Reshape", [x, indexed_shape(emit, indices, shape[1:])])
        to = site.onnx_dtype if out_type is None else out_type
        if to != onnx.TensorProto.FLOAT:
            x = emit("Cast", [x], dtype=FLOAT_TYPES[to], to=to)
        last = x.inputs[0]
        gather.outputs.clear()  # the old Gather goes dead; its output now comes from `last`
        last.outputs[0] = output
    return table


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    """A table read only as Gather data along axis 0 (in any scope: each Gather's nodes go into
    its own graph), with no group spanning rows: each gathered row can be dequantized on its
    own. 4-bit rows are packed by halves and split with uint8 BitShift (opset 11), so they need
    an even length."""
    readers = consumers(site)
    rank = len(site.shape)
    row = int(np.prod(site.shape[1:])) if rank >= 1 else 0
    if not (rank >= 1 and readers and all(n.op == "Gather" and i == 0 and n.attrs.get("axis", 0) % rank == 0
                                          for n, i in readers)):
        return "not read only as the data of Gather along axis 0"
    if scheme.granularity != "tensor" and (scheme.granularity == "channel") != (scheme.axis == 0):
        return "its groups span rows (channels along axis 0, or blocks along another axis, are needed)"
    if dtype in ("int4", "uint4") and not (opset >= 11 and row % 2 == 0):
        return "4-bit rows need an even length and opset 11"
    return None


def _build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> None:
    build_gathered(site, qt, names)


LOWERING = Lowering("gather", "embedding table: integer rows gathered, then dequantized", fits, _build,
                    min_opset=lambda dtype, granularity: 11 if dtype in ("int4", "uint4") else 1, float_scales=False)
