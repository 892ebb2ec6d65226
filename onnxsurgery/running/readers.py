"""Whether a rewrite changed only weights: the nodes that read activations (anything computed
from a graph input), counted by kind, are the input's, at the same opset.

Verification's batch-2 sample exists to catch a result that breaks a batch dimension (an
opset upgrade that fixed a Reshape to batch 1 moved MiniLM's batch-4 outputs by 8.4%). Where
every change is a weight feeding the same reader (DequantizeLinear or a Cast chain in front of
the same MatMul or Conv), the activations flow through the nodes they flowed through, and a
batch the input took the result takes too: that sample is then not run (isnet_fp16 at
1024x1024: its batch of 2 was the costliest run of both sides). Where a kind changed
(MatMulNBits for a MatMul, a Gather's lowering, a Conv's zero-point Convs, a scaled MatMul's
ReduceSum) or the opset did, it is kept. Read without the weights' payloads.
"""

from __future__ import annotations

import collections
import os

import onnx


def same_readers(reference, candidate) -> bool:
    """Whether `candidate` (a path, a ModelProto or a gs.Graph) reads activations with the
    nodes `reference` does, by kind (module doc); False where either cannot be read, or holds
    a subgraph (If, Loop, Scan: not looked into)."""
    ours, theirs = _readers(reference), _readers(candidate)
    return ours is not None and ours == theirs


def _readers(model) -> tuple | None:
    """(opset, the activation readers' kinds counted) or None (same_readers)."""
    try:
        opset, seeds, nodes = _graph(model)
    except Exception:  # noqa: BLE001 - unreadable: the sample is kept
        return None
    if any(node[4] for node in nodes):
        return None
    readers: dict[str, list[int]] = collections.defaultdict(list)  # value -> the nodes reading it
    for index, (_, _, inputs, _, _) in enumerate(nodes):
        for name in set(inputs):
            readers[name].append(index)
    # a walk from the graph's inputs: a graph mid-rewrite need not be sorted yet
    reached, todo = set(), list(seeds)
    while todo:
        for index in readers.get(todo.pop(), ()):
            if index not in reached:
                reached.add(index)
                todo.extend(nodes[index][3])
    kinds = collections.Counter((nodes[i][0], nodes[i][1]) for i in reached)
    return opset, tuple(sorted(kinds.items()))


def _graph(model):
    """(default opset, graph input names, [(domain, op, inputs, outputs, holds a subgraph)])."""
    if isinstance(model, (str, os.PathLike)):
        from .feeds import _structure

        model = _structure(model)
    if isinstance(model, onnx.ModelProto):
        g = model.graph
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        constant = {t.name for t in g.initializer}
        nodes = [(n.domain or "", n.op_type, list(n.input), list(n.output),
                  any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute))
                 for n in g.node]
        return opset, [i.name for i in g.input if i.name not in constant], nodes
    import onnx_graphsurgeon as gs

    nodes = [(n.domain or "", n.op, [t.name for t in n.inputs], [t.name for t in n.outputs],
              any(isinstance(v, gs.Graph) or isinstance(v, list) and any(isinstance(x, gs.Graph) for x in v)
                  for v in n.attrs.values()))
             for n in model.nodes]
    return model.opset, [t.name for t in model.inputs if not isinstance(t, gs.Constant)], nodes
