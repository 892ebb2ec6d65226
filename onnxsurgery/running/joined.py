"""A twinned graph's copies of one MatMul over a weight, joined into one MatMul (twinned.py).

A streamed session (sessions.py) does not pre-pack: onnxruntime's MatMul packs its whole weight
(MLAS's B panels) at every call, which for a few rows costs more than the product: a
[2048, 5632] float weight, 12 rows 12.6 ms of CPU a call, 24 rows 15.1 ms, one row (MLAS's GEMV,
no packing) 3.1 ms. A twinned session's copies each called it, so each weight was packed once
per copy. Joined, each copy's rows are flattened to [rows, K], concatenated, multiplied once,
split back and reshaped: one packing per weight.

Each row is computed by the kernel a MatMul of its own runs where that one had 2 rows or more
(MLAS's GEMM: a row's sums do not depend on the other rows, measured bit-identical at 2-36
rows); a copy of a single row would have taken the GEMV, which rounds otherwise. Both sides of a
comparison join alike (the reference's twinned runs: chained.py), so that a lossless rewrite
still compares bit-identical.
"""

from __future__ import annotations

import onnx
from onnx import helper

# Split's sizes as an input (opset 13); Flatten's negative axis (11)
MIN_OPSET = 13

# An 8-bit weight whose float copy is larger than twice this is cast and multiplied in chunks of
# columns of about this many bytes (`cast_chunks`), each of MIN_COLUMNS or more: MLAS's SGEMM
# keeps its K blocks (what a column's sums are) unless a thread's share of the columns is 64 or
# fewer, or K is 128 or less (sgemm.cpp's stride rule): 2048 columns keep that up to 16 threads
CHUNK_BYTES = 16 * 2**20
MIN_COLUMNS = 2048
MIN_ROWS = 256


# ops whose output has their first input's rank, and those whose rank is their inputs' largest
_SAME_RANK = {"Cast", "CastLike", "DequantizeLinear", "Identity", "Neg", "Abs", "Relu", "Sqrt", "Reciprocal",
              "Transpose", "Clip", "Round", "Floor", "Ceil", "Exp", "Log", "Sign"}
_BROADCAST = {"Mul", "Sub", "Add", "Div", "Pow", "Where", "Min", "Max"}


def weight_ranks(model: onnx.ModelProto) -> dict[str, int]:
    """The rank of each initializer of `model`'s main graph and of each value computed from
    constants through the ops a weight's lowering uses (a Cast, a DequantizeLinear, a scale's Mul,
    a Reshape to a constant shape), by name: a MatMul joins only over a weight of rank 2. Told
    from the protos alone (onnx's shape inference: 5 MB more anonymous memory for the session's
    life, and it reads nothing more here)."""
    g = model.graph
    ranks = {t.name: len(t.dims) for t in g.initializer}
    sizes = {t.name: list(t.dims) for t in g.initializer}  # a shape tensor's length is its output's rank
    for node in g.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and node.output:
                ranks[node.output[0]] = len(value.dims)
                sizes[node.output[0]] = list(value.dims)
            continue
        known = [ranks.get(name) for name in node.input if name]
        if not node.output or not known or None in known:
            continue
        if node.op_type in _SAME_RANK:
            ranks[node.output[0]] = known[0]
        elif node.op_type in _BROADCAST:
            ranks[node.output[0]] = max(known)
        elif node.op_type == "Reshape" and len(sizes.get(node.input[1], [])) == 1:
            ranks[node.output[0]] = sizes[node.input[1]][0]
    return ranks


def joinable(node: onnx.NodeProto, varying: set[str], ranks: dict[str, int]) -> bool:
    """Whether `node` is a MatMul of an activation by a weight of rank 2 (computed from constants
    alone), which `join` can run once for every copy."""
    return (node.op_type == "MatMul" and node.domain in ("", "ai.onnx") and len(node.input) == 2
            and node.input[0] in varying and node.input[1] not in varying and ranks.get(node.input[1]) == 2)


class Joiner:
    """Builds the joined MatMuls of one graph; `constants` are the initializers they read."""

    def __init__(self, prefix: str = "__joined"):
        self._prefix = prefix
        self._count = 0
        values = {"zero": [0], "one": [1], "minus_one": [-1]}
        self._names = {key: f"{prefix}_{key}" for key in values}
        self.constants = [helper.make_tensor(self._names[key], onnx.TensorProto.INT64, [1], v)
                          for key, v in values.items()]

    def before(self, activations: list[str]) -> tuple[list[onnx.NodeProto], str, list]:
        """(nodes that flatten and concatenate each copy's `activations`, the joined rows' name,
        what `after` needs): run before the weight's own producers, so that its float copy is made
        right before the one MatMul that reads it."""
        self._count += 1
        stem = f"{self._prefix}{self._count}"
        zero, one, minus_one = (self._names[k] for k in ("zero", "one", "minus_one"))
        nodes, flats, rows, leads = [], [], [], []
        for k, a in enumerate(activations):
            flat, shape, flat_shape = f"{stem}_flat{k}", f"{stem}_shape{k}", f"{stem}_flat_shape{k}"
            nodes += [helper.make_node("Flatten", [a], [flat], axis=-1),
                      helper.make_node("Shape", [a], [shape]),
                      helper.make_node("Slice", [shape, zero, minus_one, zero], [f"{stem}_lead{k}"]),
                      helper.make_node("Shape", [flat], [flat_shape]),
                      helper.make_node("Gather", [flat_shape, zero], [f"{stem}_rows{k}"], axis=0)]
            flats.append(flat)
            rows.append(f"{stem}_rows{k}")
            leads.append(f"{stem}_lead{k}")
        nodes += [helper.make_node("Concat", flats, [f"{stem}_joined"], axis=0),
                  helper.make_node("Concat", rows, [f"{stem}_rows"], axis=0)]
        return nodes, f"{stem}_joined", [stem, leads]

    def after(self, node: onnx.NodeProto, joined: str, state: list, outputs: list[str]) -> list[onnx.NodeProto]:
        """The one MatMul of `joined` by `node`'s weight, then each copy's rows cut back out under
        its own output name (`outputs`, copy by copy), in its own leading shape."""
        stem, leads = state
        one = self._names["one"]
        product, parts = f"{stem}_product", [f"{stem}_part{k}" for k in range(len(outputs))]
        matmul = onnx.NodeProto()
        matmul.CopyFrom(node)
        matmul.input[:] = [joined, node.input[1]]
        matmul.output[:] = [product]
        nodes = [matmul,
                 helper.make_node("Shape", [product], [f"{stem}_product_shape"]),
                 helper.make_node("Gather", [f"{stem}_product_shape", one], [f"{stem}_columns"], axis=0),
                 helper.make_node("Split", [product, f"{stem}_rows"], parts, axis=0)]
        for k, (lead, part, out) in enumerate(zip(leads, parts, outputs)):
            nodes += [helper.make_node("Concat", [lead, f"{stem}_columns"], [f"{stem}_out_shape{k}"], axis=0),
                      helper.make_node("Reshape", [part, f"{stem}_out_shape{k}"], [out])]
        return nodes


def column_chunks(rows: int, columns: int, chunk_bytes: int | None = None) -> list[tuple[int, int]] | None:
    """[start, end) ranges of a [rows, columns] float weight's columns, each copy about
    `chunk_bytes` (CHUNK_BYTES), a multiple of 16 columns (MLAS's strips) and MIN_COLUMNS or more
    (a shorter last one joins the one before), or None where the whole copy is at most twice
    that, K is under MIN_ROWS, or one chunk would be the whole."""
    chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    if 4 * rows * columns <= 2 * chunk_bytes or rows < MIN_ROWS:
        return None
    step = max(MIN_COLUMNS, chunk_bytes // (4 * rows) // 16 * 16)
    starts = list(range(0, columns - MIN_COLUMNS + 1, step)) or [0]
    chunks = [(start, end) for start, end in zip(starts, [*starts[1:], columns])]
    return chunks if len(chunks) > 1 else None


def cast_chunks(matmul: onnx.NodeProto, cast: onnx.NodeProto, chunks: list[tuple[int, int]],
                constants: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    """`matmul` (a joined MatMul whose weight is `cast`'s float copy of an 8-bit [K, N] initializer)
    as one Slice -> Cast -> MatMul per chunk of the initializer's columns, concatenated into its
    output: the float copy is made a chunk at a time, each freed once multiplied.

    int8's lm_head on dec-l4 ([2048, 32000]): a 262 MB copy, 64K of the twinned run's ~100K minor
    faults and its anonymous peak; in chunks of 16 MiB, glibc's heap takes each chunk's pages
    back for the next. Each output column is what the whole product computes, bit for bit: MLAS's
    SGEMM sums a column over K in the same blocks whatever the other columns (measured on
    [24, 2048] x [2048, 32000] in chunks of 1024, 2000 and 2048 columns)."""
    stem, nodes, parts = matmul.output[0], [], []
    axes = f"{stem}_axes"
    constants.append(helper.make_tensor(axes, onnx.TensorProto.INT64, [1], [1]))
    for k, (start, end) in enumerate(chunks):
        bounds = [f"{stem}_start{k}", f"{stem}_end{k}"]
        constants += [helper.make_tensor(bounds[0], onnx.TensorProto.INT64, [1], [start]),
                      helper.make_tensor(bounds[1], onnx.TensorProto.INT64, [1], [end])]
        weight, part = f"{stem}_weight{k}", f"{stem}_columns{k}"
        copy = onnx.NodeProto()
        copy.CopyFrom(cast)
        copy.name = f"{cast.name}_chunk{k}" if cast.name else ""
        copy.input[:] = [f"{stem}_quantized{k}"]
        copy.output[:] = [weight]
        product = onnx.NodeProto()
        product.CopyFrom(matmul)
        product.name = f"{matmul.name}_chunk{k}" if matmul.name else ""
        product.input[1] = weight
        product.output[:] = [part]
        nodes += [helper.make_node("Slice", [cast.input[0], *bounds, axes], [f"{stem}_quantized{k}"]), copy, product]
        parts.append(part)
    return nodes + [helper.make_node("Concat", parts, [stem], axis=-1)]
