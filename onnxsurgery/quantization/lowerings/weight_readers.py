"""Who reads a weight: its readers, or, for a weight stored in a narrower float and read only
through Casts to float32 (a bfloat16 checkpoint exported as bf16 weights -> Cast -> MatMul), the
readers behind those Casts. Every lowering that replaces the Casts, and the rules that pick one
(load_memory.py), ask here."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, consumers, readers_by_graph
from ..options import FLOAT_TYPES


def through_casts(site: ConstantSite) -> list[tuple[gs.Node, int]] | None:
    """The readers behind a weight stored in a narrower float and read only through Casts to
    float32 in its own graph (a bfloat16 checkpoint exported as bf16 weights -> Cast -> MatMul):
    the int8 form can feed them in float32 directly, and the Casts go. A reader behind a Cast
    may sit in a subgraph (an If branch reading the outer Cast's output: oww_hey_jarvis'
    verifier), as a float32 weight's own reader may. None otherwise."""
    readers = consumers(site)
    if site.onnx_dtype not in (onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16) or not readers:
        return None
    if any(cast.op != "Cast" or cast.attrs.get("to") != onnx.TensorProto.FLOAT for cast, _ in readers):
        return None  # before the set of every node: asked per weight, several times (isnet_fp16: 834)
    here = {id(n) for n in site.scope.graph.nodes}
    found = []
    for cast, _ in readers:
        if id(cast) not in here or any(cast.outputs[0] is out for out in site.scope.graph.outputs):
            return None
        behind = [(node, i) for node in cast.outputs[0].outputs for i, t in enumerate(node.inputs)
                  if t is cast.outputs[0]]
        if not behind:
            return None
        found += behind
    return found


def feed_or_cast_back(site: ConstantSite, out: gs.Tensor, emit, shape: list[int],
                      behind_casts: bool = True) -> gs.Tensor | None:
    """Where `out`, a float32 chain for `site`, goes. A weight read only through Casts to float32
    (through_casts; `behind_casts` False: not asked): the Casts' readers take `out` directly, no
    rounding to 16 bits and back (the value a float32 weight's chain gives), and None is returned.
    Otherwise `out`, cast back to the weight's own type where that is not float32."""
    behind = through_casts(site) if behind_casts else None
    if behind is not None:
        for node, index in behind:
            node.inputs[index] = out
        return None
    if site.onnx_dtype != onnx.TensorProto.FLOAT:
        out = emit("Cast", [out], dtype=FLOAT_TYPES[site.onnx_dtype], shape=shape, to=site.onnx_dtype)
    return out


def effective_readers(site: ConstantSite) -> list[tuple[gs.Node, int]]:
    """Who multiplies the weight: its readers, or those behind its Casts (through_casts)."""
    return through_casts(site) or consumers(site)


def effective_readers_by_graph(site: ConstantSite) -> list[tuple[gs.Graph, list[tuple[gs.Node, int]]]]:
    """effective_readers grouped by the graph holding each (graph_utils.readers_by_graph): where
    a lowering puts the nodes it adds for a reader."""
    return readers_by_graph(site, through_casts(site))
