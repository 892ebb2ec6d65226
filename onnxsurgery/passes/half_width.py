"""Store float32 constants in 2 bytes where that is exact (lossless half-width storage).

Before: a float32 constant (initializer or `Constant` node, any scope) whose every value float16
or bfloat16 holds exactly, as in an fp32 export of a bf16 or fp16 checkpoint (most LLMs).
After: the same values stored as float16 (preferred: every runtime reads it) or bfloat16 (only
from opset 13, where Cast takes it), and a `Cast` to float32 in each graph that reads them. The
readers see the same float32 values, bit for bit; onnxruntime folds the Cast at session start,
so no run-time cost and one float32 copy in memory, as before.

A table read only as the data of Gather nodes (an embedding) gets its Cast after each Gather
instead: Gather only selects, so Cast(Gather(T16, ids)) is Gather(T, ids) bit for bit, and the
table stays 2 bytes in memory with no fold at load. all-MiniLM-L6-v2 with bf16-exact weights,
peak RSS growth over session creation: 1.04x the float32 original's with the Cast before its
30522x384 table (the fold holds both copies), below it after.

One Cast per reading graph, not one in the scope feeding a subgraph: onnxruntime's
FuseInitializersTransformer (1.31, constant folding off) fails to load a model whose half-width
initializer's Cast is read only implicitly by an If/Loop/Scan node (see quantization/apply.py).

Exactness is a bit-pattern round trip (to 16 bits and back gives the same uint32s), so -0.0,
infinities and subnormals are kept. A constant is left alone when:
- it holds a NaN (onnxruntime's Cast may quiet a signalling NaN: not bit-exact);
- it is a graph output or an overridable input (its type is part of the interface);
- it has fewer than `min_elements` values, or the 2 bytes saved per value would not pay for the
  Cast nodes it needs;
- a reader is outside the default ONNX domain, or a Quantize/DequantizeLinear (an already
  quantized model's scales: its fusions want the constant itself, not a Cast of it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from ..graph_utils import (
    QUANT_READERS,
    ConstantSite,
    NameAllocator,
    c_order,
    collect_constants,
    consumers,
    graph_outputs_holding,
    is_file_backed,
    is_sparse,
    iter_scopes,
    read_stored,
    readers_by_graph,
    stored_bytes,
)
from ..defaults import MERGE_MIN_ELEMENTS
from ..report import PassReport
from .base import Estimate, PassBase
from .digests import BFLOAT16_FROM_OPSET, CHUNK_BYTES, half_type_of

FLOAT16_FROM_OPSET = 6  # Cast with a numeric `to`
HALF_NAMES = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}


def cast_overhead(name: str) -> int:
    """Bytes a Cast node and its output's value info add for a constant called `name` (about:
    three names, the node's fields, the type)."""
    return 4 * len(name.encode()) + 64


@dataclass(frozen=True)
class HalfWidth(PassBase):
    """Store exactly representable float32 constants as float16/bfloat16 with a Cast, in place.
    `opset` None: the graph's. `store` (lazy.ExternalFiles): told of each 2-byte copy made, to
    move them out of memory as they accumulate."""

    min_elements: int = MERGE_MIN_ELEMENTS
    opset: int | None = None
    store: object = None
    name = "half_width"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """Exact for the payload: reads the float32 constants to check that they round-trip."""
        saved = sum(site.nbytes // 2 for site, half_type, _ in
                    _choices(graph, overridable, self.min_elements, self.opset or graph.opset, removed)
                    if half_type is not None)
        return Estimate(self.name, saved)

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        names = NameAllocator(graph)
        stored: list[dict] = []
        for site, half_type, reason in _choices(graph, overridable, self.min_elements, self.opset or graph.opset):
            if half_type is None:
                if reason is not None:
                    report.skip(site.name, reason)
                continue
            _store(site, half_type, names)
            saved = site.nbytes // 2
            if self.store is not None:
                self.store.produced(graph, saved)
            report.changed += 1
            report.bytes_saved += saved
            stored.append({"name": site.name, "as": HALF_NAMES[half_type], "bytes_saved": saved})
        report.details = {"stored": stored,
                          "as": {k: sum(1 for s in stored if s["as"] == k) for k in HALF_NAMES.values()}}
        return report


def _choices(graph: gs.Graph, overridable: frozenset[str], min_elements: int, opset: int,
             removed: frozenset[int] = frozenset()):
    """(site, FLOAT16 | BFLOAT16, None) for each float32 constant that may be stored in 2 bytes,
    (site, None, reason) for one that may not, and (site, None, None) for one not worth a word
    (too small, dead after a merge)."""
    if opset < FLOAT16_FROM_OPSET:
        return
    scopes = list(iter_scopes(graph))
    for site in collect_constants(graph, scopes):
        if site.onnx_dtype != onnx.TensorProto.FLOAT or id(site.tensor) in removed or is_sparse(site.tensor):
            continue
        readers = consumers(site)
        if not readers or site.num_elements < min_elements:
            continue
        reason = _refusal(site, scopes, readers, overridable)
        if reason is None and site.nbytes // 2 <= cast_overhead(site.name) * len(readers_by_graph(site)):
            continue  # too small to pay for its Casts
        if reason is not None:
            yield site, None, reason
            continue
        half_type, why = exact_half_type(site.tensor, site.nbytes, bfloat16=opset >= BFLOAT16_FROM_OPSET)
        yield site, half_type, why


def _refusal(site: ConstantSite, scopes, readers, overridable: frozenset[str]) -> str | None:
    if site.name in overridable:
        return "overridable graph input"
    if graph_outputs_holding(scopes, site.value):
        return "graph output: its type is part of the interface"
    for node, _ in readers:
        if (node.domain or "") not in ("", "ai.onnx"):
            return f"read by {node.op} of domain {node.domain}"
        if node.op in QUANT_READERS:
            return f"read by {node.op} (a quantized model's scale or zero point)"
    return None


def exact_half_type(tensor: gs.Constant, nbytes: int, *, bfloat16: bool) -> tuple[int | None, str | None]:
    """(FLOAT16 or BFLOAT16, None) when every value of the float32 `tensor` survives the round
    trip through that type bit for bit (float16 preferred), else (None, why): digests.half_type_of."""
    return half_type_of(lambda n: bytes(_first_bytes(tensor, n)), lambda: _chunks(tensor, nbytes), nbytes,
                        bfloat16=bfloat16)


def _first_bytes(tensor: gs.Constant, n: int):
    if is_file_backed(tensor):
        return read_stored(tensor, 0, n)
    return memoryview(stored_bytes(tensor))[:n]


def _chunks(tensor: gs.Constant, nbytes: int):
    if is_file_backed(tensor):
        for offset in range(0, nbytes, CHUNK_BYTES):
            yield read_stored(tensor, offset, min(CHUNK_BYTES, nbytes - offset))
        return
    data = memoryview(stored_bytes(tensor))
    for offset in range(0, nbytes, CHUNK_BYTES):
        yield data[offset:offset + CHUNK_BYTES]


def half_width_constant(name: str, tensor: gs.Constant, nbytes: int, half_type: int) -> gs.Constant:
    """The float32 `tensor`'s values as a new `half_type` constant called `name`."""
    bits = np.concatenate([np.frombuffer(c, dtype="<u4") for c in _chunks(tensor, nbytes)]) if nbytes else \
        np.zeros(0, "<u4")
    shape = [int(d) for d in tensor.shape]
    if half_type == onnx.TensorProto.FLOAT16:
        return gs.Constant(name, c_order(bits.view("<f4").astype(np.float16).reshape(shape)))
    # gs cannot export a bfloat16 numpy array: a raw TensorProto, as quant does for int4
    upper = (bits >> 16).astype("<u2")
    proto = onnx.helper.make_tensor(name, onnx.TensorProto.BFLOAT16, shape, upper.tobytes(), raw=True)
    return gs.Constant(name, LazyValues(proto))


def _store(site: ConstantSite, half_type: int, names: NameAllocator) -> None:
    half = half_width_constant(names.new(f"{site.name}_{HALF_NAMES[half_type]}"), site.tensor, site.nbytes,
                               half_type)
    if _gathered_only(site):
        _cast_after_gathers(site, half, half_type, names)
        return
    for graph, readers in readers_by_graph(site):
        out = gs.Variable(names.new(f"{site.name}__cast"), dtype=np.float32, shape=list(site.shape))
        graph.nodes.append(gs.Node("Cast", name=names.new(f"{site.name}__Cast"), attrs={"to": onnx.TensorProto.FLOAT},
                                   inputs=[half], outputs=[out]))
        for node, index in readers:
            node.inputs[index] = out


def _gathered_only(site: ConstantSite) -> bool:
    """Whether every reader of `site` is a Gather reading it as its data (input 0)."""
    readers = consumers(site)
    return bool(readers) and all(node.op == "Gather" and index == 0 for node, index in readers)


def _cast_after_gathers(site: ConstantSite, half: gs.Constant, half_type: int, names: NameAllocator) -> None:
    """Each Gather of `site` reads `half` and a Cast to float32 follows it into the Gather's own
    output, so that its readers are unchanged."""
    dtype = np.float16 if half_type == onnx.TensorProto.FLOAT16 else None  # gs has no numpy bfloat16
    for graph, readers in readers_by_graph(site):
        for node, index in readers:
            rows = node.outputs[0]
            gathered = gs.Variable(names.new(f"{rows.name}_{HALF_NAMES[half_type]}"), dtype=dtype, shape=rows.shape)
            node.inputs[index], node.outputs[0] = half, gathered
            graph.nodes.append(gs.Node("Cast", name=names.new(f"{site.name}__Cast"),
                                       attrs={"to": onnx.TensorProto.FLOAT}, inputs=[gathered], outputs=[rows]))
