"""A graph cut into stages that run one after the other, each its own small model whose
initializers are the graph's own (external references into the same data file): issue 58's
lockstep idea, where a decoder's result would run stage by stage as the quantizer writes its
layers instead of in one pass after the write. Measured (bench/lockstep_probe.py, docs/
benchmarks.md's lockstep22 paragraph), not yet wired into verification: the stages' graph is the
written file's, which exists only once the export is done.

A cut is a node index of the graph's (sorted) order: the stage before computes what the stages
after read (their inputs), the graph's outputs it computes are its outputs too. Each stage holds
the initializers its nodes read, as the graph has them, so a stage of a streamed model maps the
same bytes of the same file. A streamed session runs with graph optimizations off
(sessions.session_settings), so no fusion crosses a cut: the stages compute, bit for bit, what
the whole graph computes (tests/test_stages.py; on dec-l4 and the 1.36B decoder's twinned
results, int8 and int4, in the probe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

__all__ = ["Stage", "run_stages", "split_stages", "stage_cuts"]


@dataclass
class Stage:
    model: onnx.ModelProto
    inputs: list[str]  # the graph's inputs and earlier stages' values it reads
    outputs: list[str]  # the graph's outputs it computes and the values later stages read
    payload_bytes: int  # its initializers' bytes in data files (what must be written before it runs)


def _payload_bytes(tensor: onnx.TensorProto) -> int:
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return 0
    return next((int(e.value) for e in tensor.external_data if e.key == "length"), 0)


def stage_cuts(model: onnx.ModelProto, count: int, *, window: int = 64) -> list[int]:
    """Node indices where stages 2..`count` begin: each after a 1/`count` share of the elements
    of the initializers read so far (a decoder's layers, in order), moved up to `window` nodes on
    to where the fewest values cross (a layer's boundary: the hidden state and what every layer
    reads, not a layer's insides)."""
    g = model.graph
    size = {t.name: int(np.prod(t.dims, dtype=np.int64)) for t in g.initializer}
    nodes = list(g.node)
    made = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    last_read: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for name in n.input:
            if name in made:
                last_read[name] = i
    # values alive across each gap between nodes: +1 where made, -1 after the last reader
    delta = np.zeros(len(nodes) + 1, np.int64)
    for name, at in made.items():
        end = last_read.get(name, at)
        if end > at:
            delta[at + 1] += 1
            delta[end + 1] -= 1
    crossing = np.cumsum(delta)  # crossing[i]: values made before node i and read at or after it
    seen: set[str] = set()
    cumulative, total = [], 0
    for n in nodes:
        for name in n.input:
            if name in size and name not in seen:
                seen.add(name)
                total += size[name]
        cumulative.append(total)
    cuts: list[int] = []
    for k in range(1, count):
        start = next((i for i, c in enumerate(cumulative) if c >= total * k / count), len(nodes))
        span = range(max(start, cuts[-1] + 1 if cuts else 1), min(start + window, len(nodes)))
        if span:
            cuts.append(min(span, key=lambda i: (crossing[i], i)))
    return cuts


def split_stages(model: onnx.ModelProto, cuts: list[int]) -> list[Stage]:
    """`model` (its nodes sorted) as one Stage per span between `cuts`. ValueError where a
    value crossing a cut has no element type that shape inference can give (a stage's inputs
    and outputs must be typed) or a node holds a subgraph (its outer-scope reads)."""
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for n in model.graph.node for a in n.attribute):
        raise ValueError("a node holds a subgraph")
    g = model.graph
    nodes = list(g.node)
    bounds = [0, *sorted(set(cuts)), len(nodes)]
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {i.name: i for i in g.input}
    graph_outputs = {o.name: o for o in g.output}
    types = _element_types(model)
    spans = list(zip(bounds, bounds[1:]))
    readers_after: list[set[str]] = [set() for _ in spans]  # what the stages after stage j read
    for j in range(len(spans) - 2, -1, -1):
        a, b = spans[j + 1]
        readers_after[j] = readers_after[j + 1] | {x for n in nodes[a:b] for x in n.input}
    stages = []
    for j, (a, b) in enumerate(spans):
        part = nodes[a:b]
        made = {o for n in part for o in n.output if o}
        read = list(dict.fromkeys(x for n in part for x in n.input if x))
        ins = [x for x in read if x not in made and x not in inits]
        outs = [o for n in part for o in n.output if o and (o in graph_outputs or o in readers_after[j])]
        graph = onnx.helper.make_graph(
            part, f"{g.name or 'graph'}_stage{j}",
            [graph_inputs[x] if x in graph_inputs else _typed(x, types) for x in ins],
            [graph_outputs[o] if o in graph_outputs else _typed(o, types) for o in outs],
            [inits[x] for x in read if x in inits])
        stage_model = onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
        stages.append(Stage(stage_model, ins, outs, sum(_payload_bytes(inits[x]) for x in read if x in inits)))
    return stages


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Each value's element type, by shape inference over the graph alone (payloads not read)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - onnx raises its own types; the graph's own infos below
        inferred = model
    g = inferred.graph
    return {v.name: v.type.tensor_type.elem_type for v in (*g.value_info, *g.output, *g.input)
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}


def _typed(name: str, types: dict[str, int]) -> onnx.ValueInfoProto:
    if name not in types:
        raise ValueError(f"no element type for {name}, which crosses a stage's boundary")
    return onnx.helper.make_tensor_value_info(name, types[name], None)


def run_stages(stages: list[Stage], open_stage: Callable[[onnx.ModelProto], object],
               run: Callable[[object, list[str], dict[str, np.ndarray]], list[np.ndarray]],
               feeds: dict[str, np.ndarray], names: list[str], *,
               ready: Callable[[int], None] | None = None) -> list[np.ndarray]:
    """`names` computed by the stages one after the other: each stage's session opened
    (`open_stage`), run (`run`: runs.run) on the feeds and the earlier stages' values it reads,
    and freed before the next; a value no later stage reads and not asked for is let go.
    `ready(k)`: called before stage k's session is made (lockstep: wait for its bytes)."""
    values = dict(feeds)
    wanted = set(names)
    for k, stage in enumerate(stages):
        if ready is not None:
            ready(k)
        sess = open_stage(stage.model)
        got = run(sess, stage.outputs, {x: values[x] for x in stage.inputs})
        del sess
        values.update(zip(stage.outputs, got))
        later = {x for s in stages[k + 1:] for x in s.inputs}
        for name in [n for n in values if n not in later and n not in wanted]:
            del values[name]
    return [values[n] for n in names]
