"""Batches of other shapes in one run of a streamed session: the graph's copy for each
(`twin_graph`), the weights and whatever is computed from them alone shared.

A streamed session (sessions.py) reads every weight at each run, and dequantizes a quantized
one (onnxruntime's Cast, one core): a decoder's samples with a past and its first steps (no past)
differ in more than their batch (batched.py cannot join them), so they took two runs, each
casting every weight (dec-l4, 1.35 GB: ~0.6 s of CPU a run on that alone). Twinned, each weight
is cast once, and the copies' MatMuls of it run as one (joined.py: one packing per weight). Each
copy computes, bit for bit, what a run of its own does where its MatMuls have 2 rows or more
(joined.py); both sides of a comparison twin alike (`twinned_outputs`: the reference's batches,
reference_runs.py and chained.py, and the candidate's, verify.py).

Its nodes interleave, each copy's beside the other's, and the session runs them in that order
(ExecutionOrder.PRIORITY_BASED: ready nodes by index): a weight's float copy is freed once its
reader ran, so the session holds one at a time, as two runs side by side did.
"""

from __future__ import annotations

import heapq
from typing import Callable

import numpy as np
import onnx

from ..errors import VerificationError
from .batched import batch_groups, run_samples
from .joined import MIN_OPSET, Joiner, cast_chunks, column_chunks, joinable, weight_ranks
from .nibbles import Weights, nibble_halves, uint4_halves

SUFFIX = "__twin"


def twinnable(model: onnx.ModelProto) -> bool:
    """Whether `twin_graph` can copy the main graph: no node holds a subgraph (If, Loop, Scan:
    their outer-scope names would need renaming inside)."""
    return not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                   for n in model.graph.node for a in n.attribute)


def twin_graph(model: onnx.ModelProto, copies: int = 2, *, chain: dict[str, str] | None = None,
               join: bool = True) -> onnx.ModelProto:
    """`model` changed in place: its graph inputs, outputs and every node computed from an input,
    `copies` times, each copy's names with `twin_name`'s suffix (the first keeps its own); the
    nodes that read constants alone, once, each right before its first reader (module doc).
    Symbolic dimensions are renamed per copy too: the copies run at other batches and lengths.
    `chain` {input: output}: each copy after the first reads that input from the copy before's
    output instead of a feed of its own (chained.py: a decoder's steps on the pasts its first
    steps computed). `join`: the copies' MatMuls of one weight run as one (joined.py).
    ValueError where it cannot be copied so (`twinnable`; an output computed from constants; a
    weight's DequantizeLinear, below; a chain that makes a cycle)."""
    if not twinnable(model):
        raise ValueError("a node holds a subgraph")
    chain = chain or {}
    g = model.graph
    constant = {t.name for t in g.initializer} | {t.name for t in g.sparse_initializer}
    inputs = [i for i in g.input if i.name not in constant]
    varying = {i.name for i in inputs}
    if not set(chain) <= varying:
        raise ValueError("a chained name that is no graph input")
    nodes = list(g.node)
    for node in nodes:  # sorted (onnx's rule): a node's inputs are computed before it
        if any(name in varying for name in node.input):
            varying.update(o for o in node.output if o)
    if not all(o.name in varying for o in g.output) or not set(chain.values()) <= varying:
        raise ValueError("an output computed from constants alone")
    producer = {o: node for node in nodes for o in node.output if o and o not in varying}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    ranks = weight_ranks(model) if join and opset >= MIN_OPSET else {}
    # asked of each joined MatMul's weight: counted once, not by a scan of every node per weight
    # (a 24-layer decoder's result, 169 weights over 7.7K nodes: 0.5 s of CPU before its run)
    weights = Weights(g, nodes)
    joiner = Joiner()
    new_nodes, placed = [], set()

    def place(node) -> None:  # constant-derived producers first, right before their first reader
        for name in node.input:
            source = producer.get(name)
            if source is not None and id(source) not in placed:
                placed.add(id(source))
                place(source)
                new_nodes.append(source)

    def named(name: str, k: int) -> str:
        if k and name in chain:
            return twin_name(chain[name], k - 1)
        return twin_name(name, k) if name in varying else name

    joined = 0
    for node in nodes:
        if not any(o in varying for o in node.output):
            continue  # constant-derived (a weight's Cast): one copy, read by every copy, placed below
        each = [node]
        for k in range(1, copies):
            twin = onnx.NodeProto()
            twin.CopyFrom(node)
            if node.name:
                twin.name = twin_name(node.name, k)
            twin.input[:] = [named(n, k) for n in node.input]
            twin.output[:] = [twin_name(n, k) if n else n for n in node.output]
            each.append(twin)
        if joinable(node, varying, ranks):
            before, rows, state = joiner.before([n.input[0] for n in each])
            new_nodes.extend(before)
            product = joiner.after(node, rows, state, [n.output[0] for n in each])
            cast, chunks = _cast_8bit(producer.get(node.input[1]), weights)
            halves = None if chunks else uint4_halves(cast, weights)
            if chunks:  # its float copy made a chunk of columns at a time (joined.cast_chunks)
                placed.add(id(cast))
                product[:1] = cast_chunks(product[0], cast, chunks, joiner.constants)
            elif halves:  # a 4-bit weight's even and odd columns, each through the 8-bit kernels (nibbles.py)
                placed.add(id(cast))
                product[:1] = nibble_halves(product[0], cast, halves, joiner.constants)
            else:
                place(node)
            new_nodes.extend(product)
            joined += 1
        else:
            place(node)
            new_nodes.extend(each)
    new_nodes.extend(n for n in nodes if id(n) not in placed and not any(o in varying for o in n.output))
    if joined:
        g.initializer.extend(joiner.constants)
    if _shares_dequantized(new_nodes, {id(n) for n in producer.values()}):
        # dec-l4 int4 (DequantizeLinear in blocks before each MatMul), each weight read by both
        # copies' MatMuls: 782-815 MB of anonymous memory at its peak against 313-367 MB for two
        # runs, in either execution order; cause not found. Joined (one reader): 317 MB. int8's
        # Casts, read by both: 339 MB against 409 MB.
        raise ValueError("weights dequantized by DequantizeLinear, read by each copy")
    del g.node[:]
    g.node.extend(_sorted(new_nodes))
    for group in (g.input, g.output, g.value_info):
        infos = [i for i in group if i.name in varying]
        for k in range(1, copies):
            for info in infos:
                if group is g.input and info.name in chain:
                    continue  # read from the copy before
                twin = onnx.ValueInfoProto()
                twin.CopyFrom(info)
                twin.name = twin_name(info.name, k)
                _rename_dims(twin, k)
                group.append(twin)
    return model


def _cast_8bit(node, weights: Weights):
    """(`node`, its column chunks) where it is a Cast to float of an 8-bit [K, N] initializer, its
    output read by one node alone, whose float copy joined.column_chunks cuts; else (node, None)."""
    if node is None or node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or \
            [(a.name, a.i) for a in node.attribute] != [("to", onnx.TensorProto.FLOAT)]:
        return node, None
    weight = weights.initializers.get(node.input[0])
    if weight is None or weight.data_type not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8) or \
            len(weight.dims) != 2 or weights.readers[node.output[0]] != 1:
        return node, None
    return node, column_chunks(*weight.dims)


def _shares_dequantized(nodes: list[onnx.NodeProto], constant: set[int]) -> bool:
    """Whether a value computed from constants (the nodes of ids in `constant`) through a
    DequantizeLinear is read by more than one node computed from the inputs (each copy's, not
    joined)."""
    dequantized, readers = set(), {}
    for node in nodes:  # twin_graph's order: a constant-derived producer before its readers
        if id(node) in constant:
            if node.op_type == "DequantizeLinear" or any(name in dequantized for name in node.input):
                dequantized.update(o for o in node.output if o)
            continue
        for name in set(node.input) & dequantized:
            readers[name] = readers.get(name, 0) + 1
    return any(count > 1 for count in readers.values())


def _sorted(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`nodes` in an order where each runs after whatever computes its inputs, each as early in
    the given order as that allows (the given order where it is one already: the interleaving
    above); ValueError on a cycle (a chain that reads what its own copy computes later)."""
    made = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    if all(made[name] < i for i, node in enumerate(nodes) for name in node.input if name in made):
        return list(nodes)  # every input computed before its reader: the heap below would give this order
    waiting = [0] * len(nodes)
    readers: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        for source in {made[name] for name in node.input if name in made}:
            waiting[i] += 1
            readers.setdefault(source, []).append(i)
    ready = [i for i, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for reader in readers.get(i, ()):
            waiting[reader] -= 1
            if not waiting[reader]:
                heapq.heappush(ready, reader)
    if len(order) != len(nodes):
        raise ValueError("the chained copies make a cycle")
    return order


def twinned_outputs(open_twins: Callable[[int], object], run, names: list[str],
                    samples: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]] | None:
    """Each sample's outputs from one run of `open_twins(copies)` (a session of one copy of the
    graph per batch, batched.batch_groups; `run`: runs.run), or None where that session cannot
    be had or refuses: the caller runs each batch on its own then, which says why where it fails
    too. The reference (reference_runs.py) and the candidate (verify.py) alike."""
    copies = len(batch_groups(samples))

    def together(feeds):
        return split_outputs(run(sess, outputs_of(names, copies), joined_feeds(feeds)), copies)

    def alone(feeds):  # a batch whose outputs are not per sample after all: the caller's way
        raise VerificationError("not batched")

    try:
        sess = open_twins(copies)
        return run_samples(samples, alone, merge=True, together=together)
    except VerificationError:
        return None
    finally:
        sess = None  # noqa: F841 - freed before the caller's session


def twin_name(name: str, copy: int) -> str:
    """A value's name in copy `copy` (0: the graph's own)."""
    return name if copy == 0 else f"{name}{SUFFIX}{copy}"


def joined_feeds(feeds: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Each copy's feeds under its own names: one run's."""
    return {twin_name(name, k): value for k, f in enumerate(feeds) for name, value in f.items()}


def outputs_of(names: list[str], copies: int) -> list[str]:
    """The twinned session's output names for `names`, copy after copy (`split_outputs`)."""
    return [twin_name(n, k) for k in range(copies) for n in names]


def split_outputs(outputs: list[np.ndarray], copies: int) -> list[list[np.ndarray]]:
    """One run's outputs, asked for with `outputs_of`, as each copy's."""
    each = len(outputs) // copies
    return [outputs[k * each:(k + 1) * each] for k in range(copies)]


def _rename_dims(info: onnx.ValueInfoProto, copy: int) -> None:
    if not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
        return
    for dim in info.type.tensor_type.shape.dim:
        if dim.HasField("dim_param") and dim.dim_param:
            dim.dim_param = twin_name(dim.dim_param, copy)
