"""Helpers over gs graphs: scopes (the main graph and its If/Loop/Scan subgraphs), the
constants they hold, their stored bytes, and rewiring of tensor uses.

gs facts this module relies on:
- a subgraph node that reads an outer-scope tensor holds the *same* Python object as the
  outer graph, so rewiring by identity (`is`) covers every scope at once;
- `gs.Tensor.__eq__` compares names only, so nothing here uses `==` or `in` on tensors.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper
from onnx_graphsurgeon.ir.tensor import LazyValues, SparseValues

from .node_members import all_in_graph
from .payload_sizes import payload_nbytes

# ---------------------------------------------------------------------------------------------
# Scopes


@dataclass(eq=False)
class Scope:
    """One graph in the tree of graphs: the main graph, or a subgraph attribute of a node."""

    graph: gs.Graph
    parent: Scope | None
    path: str  # "" for the main graph, else e.g. "If_0.then_branch/Loop_3.body"
    depth: int

    def is_ancestor_of(self, other: Scope) -> bool:
        """True when this scope is `other` or encloses it (so `other` can read its tensors)."""
        s: Scope | None = other
        while s is not None:
            if s is self:
                return True
            s = s.parent
        return False

    @property
    def label(self) -> str:
        return self.path or "main graph"


def iter_scopes(graph: gs.Graph) -> Iterator[Scope]:
    """Yield every graph scope, parents before children (depth-first)."""

    def walk(scope: Scope) -> Iterator[Scope]:
        yield scope
        for i, node in enumerate(scope.graph.nodes):
            if not node.attrs:  # most nodes (asked per weight, over every node: keep it short)
                continue
            for attr_name, value in node.attrs.items():
                if type(value) is gs.Graph or isinstance(value, gs.Graph):
                    node_label = node.name or f"{node.op}_{i}"
                    path = f"{scope.path}/" if scope.path else ""
                    yield from walk(
                        Scope(value, scope, f"{path}{node_label}.{attr_name}", scope.depth + 1)
                    )

    yield from walk(Scope(graph, None, "", 0))


def common_scope(scopes: list[Scope]) -> Scope:
    """The innermost scope that encloses all of `scopes` (their lowest common ancestor)."""
    result = scopes[0]
    for s in scopes[1:]:
        while not result.is_ancestor_of(s):
            assert result.parent is not None, "scopes from different graphs"
            result = result.parent
    return result


# ---------------------------------------------------------------------------------------------
# Constants


ONNX_STRING = onnx.TensorProto.STRING
# Ops that read a quantized model's scales and zero points: a constant they read is left as it
# is (onnxruntime's quantized fusions want the constant itself, in its own type and shape).
QUANT_READERS = ("DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear")


@dataclass(eq=False)
class ConstantSite:
    """One stored constant.

    Either an initializer (`node is None`; consumers read `tensor` itself) or the `value`
    tensor of a `Constant` node (consumers read the node's output Variable).
    `scope` is where the constant is visible from: for a Constant node, the graph holding the
    node; for an initializer, the innermost scope enclosing all of its uses.
    """

    tensor: gs.Constant
    node: gs.Node | None
    scope: Scope

    @property
    def value(self) -> gs.Tensor:
        """The tensor consumers read."""
        return self.tensor if self.node is None else self.node.outputs[0]

    @property
    def name(self) -> str:
        return self.value.name

    @property
    def kind(self) -> str:
        return "initializer" if self.node is None else "Constant node"

    @property
    def location(self) -> str:
        if self.scope.parent is None:
            return self.kind
        if self.node is None:
            return f"initializer, used only in {self.scope.path}"
        return f"Constant node in {self.scope.path}"

    @property
    def onnx_dtype(self) -> int:
        return onnx_dtype(self.tensor)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.tensor.shape)

    @property
    def num_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return stored_nbytes(self.tensor)


def held_values(c: gs.Constant):
    """What holds a constant's values: gs's private `Constant._values` (gs 0.6: LazyValues over
    the imported proto, SparseValues, a numpy array) or ours (file_backed.FileBackedValues). The one
    adapter over that private attribute (with `hold_values`); a gs upgrade that renames it is
    fixed here."""
    return c._values


def hold_values(c: gs.Constant, values) -> None:
    """Give `c` a holder of its values (`held_values`), e.g. one that reads them from a file on
    demand, without loading anything."""
    c._values = values


def onnx_dtype(c: gs.Constant) -> int:
    """The ONNX data type of a constant, read without touching its values."""
    if isinstance(held_values(c), LazyValues):
        tensor = held_values(c).tensor
        # gs's SparseValues is a LazyValues over a SparseTensorProto: the type is its values'
        # (a sparse initializer was an internal error in every command)
        return int(tensor.values.data_type if isinstance(tensor, onnx.SparseTensorProto) else tensor.data_type)
    from onnx_graphsurgeon.exporters.onnx_exporter import dtype_to_onnx

    return int(dtype_to_onnx(c.export_dtype if c.export_dtype is not None else c.dtype))


def stored_nbytes(c: gs.Constant) -> int:
    """Bytes of the constant's payload, computed from dtype and shape (no value is read). A sparse
    one's are what its file holds, its values and their indices, not its dense shape's."""
    held = held_values(c)
    if isinstance(held, SparseValues) and isinstance(held.tensor, onnx.SparseTensorProto):
        parts = (held.tensor.values, held.tensor.indices)
        return sum(payload_nbytes(t.data_type, math.prod(t.dims)) for t in parts if t.data_type)
    dt = onnx_dtype(c)
    if dt == ONNX_STRING:
        return int(sum(len(s) for s in np.asarray(c.values).ravel()))
    n = math.prod(c.shape) if c.shape is not None else 0  # np.prod: 10x the time, asked per weight
    return payload_nbytes(dt, int(n))


def stored_bytes(c: gs.Constant) -> bytes:
    """The constant's values as little-endian bytes, read from the stored tensor directly.

    For an imported tensor in raw form this is the protobuf's raw_data, with no numpy array
    in between; typed-field tensors (float_data, int64_data, ...) go through numpy.
    """
    v = held_values(c)
    if is_file_backed(c):
        return v.read()
    if isinstance(v, LazyValues):
        t = v.tensor
        if t.HasField("raw_data"):
            return t.raw_data
        return numpy_helper.to_array(t).tobytes()
    return np.ascontiguousarray(c.values).tobytes()


def is_file_backed(c: gs.Constant) -> bool:
    """True when the values are still in a file (file_backed.FileBackedValues) and read on demand."""
    return hasattr(held_values(c), "read")


def read_stored(c: gs.Constant, offset: int, length: int) -> bytes:
    """Bytes [offset, offset + length) of the stored values; reads only those from a file."""
    if is_file_backed(c):
        return held_values(c).read(offset, length)
    return stored_bytes(c)[offset:offset + length]


def read_values(c: gs.Constant) -> np.ndarray:
    """The constant's values as numpy, without caching them in the constant (gs's `.values`
    keeps what it loads, which would hold every weight a pass looks at in memory)."""
    values = held_values(c)
    if isinstance(values, LazyValues):
        return values.load()
    return np.asarray(c.values)


def constant_values(tensor) -> np.ndarray | None:
    """A constant's values (an initializer, or a Constant node's output: weights stored so),
    else None. Read with read_values, not gs's `.values`: that caches them in the constant, which
    then exports as an external reference without its location (a bias read so broke int4 on
    models with external data). A 16-bit constant behind a Cast to float32 (a bfloat16
    checkpoint's export) is read as the float32 values the Cast gives."""
    if isinstance(tensor, gs.Constant):
        return read_values(tensor)
    producer = tensor.inputs[0] if tensor.inputs else None
    if producer is not None and producer.op == "Cast" and producer.attrs.get("to") == onnx.TensorProto.FLOAT:
        inner = constant_values(producer.inputs[0]) if producer.inputs else None
        half = inner is not None and inner.dtype.name in ("float16", "bfloat16")
        return inner.astype(np.float32) if half else None
    if producer is not None and producer.op == "Constant" and isinstance(producer.attrs.get("value"), gs.Constant):
        return read_values(producer.attrs["value"])
    return None


def set_values(c: gs.Constant, array: np.ndarray) -> None:
    """Give a constant new in-memory values. Its imported `data_location` (EXTERNAL when the
    payload was left in the file) no longer applies, and gs would export it as such."""
    c.values = array
    c.data_location = None


def is_sparse(c: gs.Constant) -> bool:
    return isinstance(held_values(c), SparseValues)


def collect_constants(graph: gs.Graph, scopes: list[Scope] | None = None) -> list[ConstantSite]:
    """Every initializer and every `Constant` node with a `value` tensor, in all scopes.

    Initializers appear once each, with the innermost scope that encloses all their uses.
    """
    scopes = scopes if scopes is not None else list(iter_scopes(graph))
    sites: list[ConstantSite] = []
    users: dict[int, list[Scope]] = {}
    initializers: dict[int, gs.Constant] = {}
    for scope in scopes:
        for node in scope.graph.nodes:
            for t in node.inputs:
                if isinstance(t, gs.Constant):
                    initializers.setdefault(id(t), t)
                    users.setdefault(id(t), []).append(scope)
            if node.op == "Constant" and isinstance(node.attrs.get("value"), gs.Constant):
                if len(node.outputs) == 1:
                    sites.append(ConstantSite(node.attrs["value"], node, scope))
        for t in scope.graph.outputs:
            if isinstance(t, gs.Constant):
                initializers.setdefault(id(t), t)
                users.setdefault(id(t), []).append(scope)
    for key, c in initializers.items():
        sites.append(ConstantSite(c, None, common_scope(users[key])))
    return sites


# ---------------------------------------------------------------------------------------------
# Rewiring and names


def graph_outputs_holding(scopes: list[Scope], tensor: gs.Tensor) -> list[Scope]:
    return [s for s in scopes if any(o is tensor for o in s.graph.outputs)]


def consumers(site: ConstantSite) -> list[tuple[gs.Node, int]]:
    """(node, input index) for every place a node reads the constant."""
    return [(n, i) for n in site.value.outputs for i, t in enumerate(n.inputs) if t is site.value]


def read_only_by(site: ConstantSite, ops: tuple[str, ...], readers: list | None = None) -> bool:
    """Whether the constant has readers and every one is one of `ops` (`readers`: those to judge
    instead of its direct consumers, e.g. the layers behind a 16-bit weight's Casts)."""
    readers = consumers(site) if readers is None else readers
    return bool(readers) and all(node.op in ops for node, _ in readers)


def node_graphs(site: ConstantSite) -> dict[int, gs.Graph]:
    """id(node) -> the graph holding it, for every node of the site's scope and its subgraphs:
    where a lowering puts the nodes that replace a reader."""
    return {id(node): scope.graph for scope in iter_scopes(site.scope.graph) for node in scope.graph.nodes}


def readers_by_graph(site: ConstantSite,
                     readers: list | None = None) -> list[tuple[gs.Graph, list[tuple[gs.Node, int]]]]:
    """The places that read the constant (or `readers`, as read_only_by's), grouped by the graph
    (the site's scope or one of its subgraphs) holding the reading node."""
    readers = consumers(site) if readers is None else readers
    if all_in_graph(site.scope.graph, (node for node, _ in readers)):  # the usual case: no walk of every scope
        return [(site.scope.graph, readers)] if readers else []
    graph_of = node_graphs(site)
    groups: dict[int, tuple[gs.Graph, list]] = {}
    for node, index in readers:
        graph = graph_of[id(node)]
        groups.setdefault(id(graph), (graph, []))[1].append((node, index))
    return list(groups.values())


def replace_uses(old: gs.Tensor, new: gs.Tensor) -> int:
    """Point every node that reads `old` (in any scope) at `new`. Graph outputs are untouched."""
    count = 0
    for node in list(old.outputs):
        for i, t in enumerate(node.inputs):
            if t is old:
                node.inputs[i] = new
                count += 1
    return count


class NameAllocator:
    """Hands out tensor/node names that are unused in every scope of a model."""

    def __init__(self, graph: gs.Graph):
        self.used: set[str] = set()
        for scope in iter_scopes(graph):
            g = scope.graph
            self.used.update(t.name for t in g.inputs)
            self.used.update(t.name for t in g.outputs)
            for node in g.nodes:
                self.used.add(node.name)
                self.used.update(t.name for t in node.inputs)
                self.used.update(t.name for t in node.outputs)

    def new(self, base: str) -> str:
        if base not in self.used:
            self.used.add(base)
            return base
        for i in itertools.count(1):
            name = f"{base}_{i}"
            if name not in self.used:
                self.used.add(name)
                return name
        raise AssertionError("unreachable")


def c_order(array: np.ndarray) -> np.ndarray:
    """`array` in C order, as gs exports it. Not np.ascontiguousarray: that turns a scalar
    (shape []) into shape [1], which a model reading it as a scalar then refuses."""
    array = np.asarray(array)
    return array if array.flags.c_contiguous else array.copy(order="C")

