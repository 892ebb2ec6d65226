"""How much a weight's quantized form changes its layer: in the layer's output over the inputs'
statistics where --inputs gave them, else in the weight itself. The measure the measured stages
share (lean.py, channel_axis.py, symmetry.py), kept here so that no stage imports another."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...errors import InputError
from ...graph_utils import ConstantSite
from ..axes import choose_axes
from ..gptq import output_energy, output_error
from ..rounding import Quantized, weight_error


def layer_cost(values: np.ndarray, qt: Quantized, site: ConstantSite, moments) -> float:
    """The L2 error in the layer's output over `moments`, or without them the weight's relative
    L2 error (only ever compared with the same weight's other cost)."""
    if moments is None:
        return weight_error(values, qt)["rel_l2_error"]
    channel_axis, block_axis = choose_axes(site)
    return output_error(values, qt, moments.total, channel_axis=channel_axis, block_axis=block_axis) ** 0.5


def layer_norm(values: np.ndarray, site: ConstantSite, moments) -> float:
    """What layer_cost divides by to be relative: the L2 norm of the layer's output over
    `moments`; 1 without them (layer_cost is relative already)."""
    if moments is None:
        return 1.0
    channel_axis, block_axis = choose_axes(site)
    return output_energy(values, moments.total, channel_axis=channel_axis, block_axis=block_axis) ** 0.5


# Two weights of the same shape whose measured ratios lie closer than this are a tie: rounding the
# weights to bfloat16 moved PP-OCRv6 rec's by 0.11-0.15% (conv2d_95 and conv2d_103, both 192x384
# 1x1: 1.6767 and 1.6740 as shipped, 1.6742 and 1.6759 in bf16), and which of the two a budget took
# flipped with it (issue 55). About twice that move: at 0.5%, SLANet+'s conv2d_20 / conv2d_16 (0.49%
# apart, a gap bf16 does not close) changed hands and lost on its report and fresh tables; among
# weights of the same size only, open_nsfw's 64x256 and 256x64 1x1 Convs (0.10%) did, 0.000436 ->
# 0.000461 on 16 fresh images: a squeeze and an expand are not twins.
TIE_MARGIN = 0.0025


def ranked(items: list, key, twin, margin: float = TIE_MARGIN, place=None) -> list:
    """`items` by `key`, largest first, but twins (the same `twin(item)`: a weight's shape) whose
    keys lie within `margin` of their run's largest in the graph's order (`place(item)`, e.g.
    reader_order's; without it, the order of `items`), which the weights' last bits do not move: a
    budget taking one of them takes the same one whatever the rounding. Other items are not
    reordered (which of them fits changes what else fits)."""
    position = {id(item): (place(item), i) if place else i for i, item in enumerate(items)}
    runs: list[list] = []
    for item in sorted(items, key=key, reverse=True):
        first = runs[-1][0] if runs else None
        if first is not None and twin(item) == twin(first) and key(item) >= key(first) * (1 - margin):
            runs[-1].append(item)
        else:
            runs.append([item])
    return [item for run in runs for item in sorted(run, key=lambda item: position[id(item)])]


def reader_order(sites: list[ConstantSite]) -> dict[str, tuple]:
    """{site name: its first reader's place in its graph}: (the longest path from the graph's
    inputs to that reader, its index in the node list). Readers are found through Casts, and the
    path counts only nodes that the inputs reach, so neither a 16-bit storage's Casts (zoo's bf16
    puts them first) nor the initializers' order moves a weight (the tie order of `ranked`). A
    weight read only in a subgraph comes after its graph's own."""
    graphs: dict[int, tuple] = {}
    order = {}
    for site in sites:
        graph = site.scope.graph
        if id(graph) not in graphs:
            graphs[id(graph)] = _input_depths(graph), {id(n): i for i, n in enumerate(graph.nodes)}
        depth, index = graphs[id(graph)]
        places = [((depth.get(id(n)) or 0), index[id(n)]) for n in _readers(site.value) if id(n) in index]
        order[site.name] = min(places, default=(len(index), len(index)))
    return order


def _readers(tensor) -> list:
    """The nodes reading `tensor`, through Casts."""
    found, todo = [], list(tensor.outputs)
    while todo:
        node = todo.pop()
        if node.op == "Cast":
            todo.extend(node.outputs[0].outputs)
        else:
            found.append(node)
    return found


def _input_depths(graph) -> dict[int, int | None]:
    """{id(node): longest path from the graph's inputs (or an outer scope's tensors) to it; None
    for a node that reads only constants}, without recursion (graphs thousands of nodes deep)."""
    producer = {id(t): n for n in graph.nodes for t in n.outputs}
    depth: dict[int, int | None] = {}
    expanded: set[int] = set()  # nodes waiting on what is above them in the stack: their own inputs' producers
    for start in graph.nodes:
        stack = [start]
        while stack:
            node = stack[-1]
            if id(node) in depth:
                stack.pop()
                continue
            before = [producer[id(t)] for t in node.inputs if id(t) in producer]
            waiting = [p for p in before if id(p) not in depth]
            if waiting:
                if any(id(p) in expanded for p in waiting):  # else this loop never ends
                    named = node.name or (node.outputs[0].name if node.outputs else "")
                    raise InputError(f"the graph has a cycle: node '{named}' ({node.op}) reads, through other "
                                     "nodes, what it computes itself; onnxruntime refuses such a model")
                expanded.add(id(node))
                stack.extend(waiting)
                continue
            reached = [depth[id(p)] for p in before if depth[id(p)] is not None]
            fed = any(t.name and id(t) not in producer and not isinstance(t, gs.Constant) for t in node.inputs)
            depth[id(node)] = max(reached, default=-1) + 1 if reached or fed else None
            expanded.discard(id(node))
            stack.pop()
    return depth
