"""Store a float constant that every reader casts to a narrower float type as that Cast's result.

Before: a float32 constant (initializer or `Constant` node, any scope) whose every reader is a
`Cast` to float16 or bfloat16 (or a float64 one whose every reader casts it to float32), as in
mixed-precision exports: tf2onnx's Keras mixed_float16 (mk8dx_score_digits keeps 12.6 MB of its
13.4 MB so), torch autocast, onnxconverter-common's keep_io_types. Each run computes the same
narrow tensor from the wide one.
After: the constant stored in the narrow type, its values the ones that Cast computes (once, here,
as onnxruntime does: round to nearest even, overflow to infinity, subnormals kept), and each Cast
gone, its readers reading the constant. A Cast whose output is a graph output, or is read from
inside a subgraph, stays: a no-op Cast of a tensor of its own type. The graph computes the same
bits and the file loses the difference (half of a float32 constant's bytes).

Loop-carried constants (tf2onnx passes an LSTM's weights into its while-Loop as loop state, each
iteration passing them on unchanged): a Loop reading the constant as a state variable counts as
a reader when its body gives that state back as it is (body output i-1 is body input i) and the
Loop's final value of it is read by nobody; the body's readers of the state are then judged the
same way, and the state's type (body input, body output, Loop output) becomes the narrow one.

Only the narrowing way: a float16 constant cast to float32 at every run is smaller as it is.
A constant is left alone when:
- one reader is anything but such a Cast or Loop (a Cast to another type included);
- it is a graph output or an overridable input (its type is part of the interface);
- it holds a NaN (onnxruntime's Cast may give a NaN other bits than numpy's);
- it has fewer than `min_elements` values.
float64 -> float16/bfloat16 is not taken: onnxruntime 1.32 rounds through float32 (twice: 1 + 2^-11 +
2^-40 gives 1.0), numpy once (1.00098); another build could do either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from ..defaults import MERGE_MIN_ELEMENTS
from ..graph_utils import (
    ConstantSite,
    NameAllocator,
    c_order,
    collect_constants,
    is_sparse,
    iter_scopes,
    read_values,
    replace_uses,
)
from ..report import PassReport
from .base import Estimate, PassBase

FLOAT, DOUBLE = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE
FLOAT16, BFLOAT16 = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16
# (stored type, Cast's `to`) pairs taken, and the bytes a value of the narrow type takes
NARROWER = {(FLOAT, FLOAT16): 2, (FLOAT, BFLOAT16): 2, (DOUBLE, FLOAT): 4}
TYPE_NAMES = {FLOAT: "float32", DOUBLE: "float64", FLOAT16: "float16", BFLOAT16: "bfloat16"}
DEFAULT_DOMAINS = ("", "ai.onnx", None)


class _Refused(Exception):
    """Why a constant stays as it is."""


@dataclass(frozen=True)
class CastWeights(PassBase):
    """Store float constants that every reader Casts to a narrower float type as the Cast's
    result, the Casts removed (module doc). `store` (lazy.ExternalFiles): told of each narrow
    copy made, to move them out of memory as they accumulate."""

    min_elements: int = MERGE_MIN_ELEMENTS
    store: object = None
    name = "cast_weights"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """Exact for the payloads (reads each candidate for NaNs); the Cast nodes removed are not
        counted. `removes` the wide constants, so that half_width's estimate leaves them out."""
        saved, gone = 0, set()
        for site, found, _ in _choices(graph, overridable, self.min_elements, removed, narrow=False):
            if found is not None:
                saved += site.nbytes - _narrow_nbytes(site, found.to)
                gone.add(id(site.tensor))
        return Estimate(self.name, saved, frozenset(gone))

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        names = NameAllocator(graph)
        stored: list[dict] = []
        for site, found, reason in _choices(graph, overridable, self.min_elements):
            if found is None:
                if reason is not None:
                    report.skip(site.name, reason)
                continue
            new_bytes = _narrow_nbytes(site, found.to)
            kept = _store(site, found, names)
            if self.store is not None:
                self.store.produced(graph, new_bytes)
            report.changed += 1
            report.bytes_saved += site.nbytes - new_bytes
            stored.append({"name": site.name, "as": TYPE_NAMES[found.to], "bytes_saved": site.nbytes - new_bytes,
                           "casts_removed": len(found.casts) - kept, "casts_kept": kept,
                           "loop_states": len(found.carries)})
        report.details = {"stored": stored}
        return report


@dataclass
class _Found:
    to: int
    casts: list[gs.Node]
    carries: list[tuple[gs.Node, int]]  # (Loop, input index) of each loop state the constant flows through
    values: np.ndarray | None = None
    graph_of: dict[int, gs.Graph] | None = None  # each node's graph (_Context's)


class _Context:
    """What every judgement needs, walked once per pass: each node's graph, every graph output."""

    def __init__(self, graph: gs.Graph):
        self.scopes = list(iter_scopes(graph))
        self.graph_of = {id(n): s.graph for s in self.scopes for n in s.graph.nodes}
        self.outputs = {id(t) for s in self.scopes for t in s.graph.outputs}


def _choices(graph: gs.Graph, overridable: frozenset[str], min_elements: int, removed: frozenset[int] = frozenset(),
             narrow: bool = True):
    """(site, _Found with the narrow values, None) for each constant to store narrow, (site, None,
    reason) for a candidate (one reader a narrowing Cast) left alone, nothing for the rest.
    `narrow` False (an estimate): the values only checked, not cast."""
    ctx = _Context(graph)
    for site in collect_constants(graph, ctx.scopes):
        dtype = site.onnx_dtype
        if dtype not in (FLOAT, DOUBLE) or id(site.tensor) in removed or is_sparse(site.tensor):
            continue
        if site.num_elements < min_elements or not _any_narrowing_cast(site.value, dtype):
            continue
        try:
            if site.name in overridable:
                raise _Refused("overridable graph input")
            casts, carries = _trace(site.value, ctx)
            found = _Found(_common_target(casts, dtype), casts, carries, graph_of=ctx.graph_of)
            values = read_values(site.tensor)
            found.values = cast_values(values, found.to) if narrow else _check_nan(values)
        except _Refused as e:
            yield site, None, str(e)
            continue
        yield site, found, None


def _any_narrowing_cast(value: gs.Tensor, dtype: int) -> bool:
    """Whether a narrowing Cast reads `value`, directly or through loop states (a quick look
    that decides whether a refusal is worth a word)."""
    for node in value.outputs:
        if node.op == "Cast" and (dtype, node.attrs.get("to")) in NARROWER:
            return True
        if node.op == "Loop" and isinstance(node.attrs.get("body"), gs.Graph):
            body = node.attrs["body"]
            states = [body.inputs[i] for i, t in enumerate(node.inputs) if t is value and 2 <= i < len(body.inputs)]
            if any(_any_narrowing_cast(state, dtype) for state in states):
                return True
    return False


def _trace(value: gs.Tensor, ctx: _Context,
           body: gs.Graph | None = None) -> tuple[list[gs.Node], list[tuple[gs.Node, int]]]:
    """The Casts that read `value`, through loop states; _Refused where another node reads it.
    `body`: the Loop body whose state `value` is (its one output there is the state given back)."""
    if id(value) in ctx.outputs and any(s.graph is not body and any(o is value for o in s.graph.outputs)
                                        for s in ctx.scopes):
        raise _Refused("graph output: its type is part of the interface")
    casts: list[gs.Node] = []
    carries: list[tuple[gs.Node, int]] = []
    seen: set[int] = set()
    for node in value.outputs:
        if id(node) in seen:
            continue
        seen.add(id(node))
        for index, t in enumerate(node.inputs):
            if t is not value:
                continue
            if node.domain not in DEFAULT_DOMAINS:
                raise _Refused(f"read by {node.op} of domain {node.domain}")
            if node.op == "Cast":
                casts.append(node)
            elif node.op == "Loop" and index >= 2:
                inner_casts, inner_carries = _trace(_unchanged_state(node, index, ctx), ctx, node.attrs["body"])
                casts += inner_casts
                carries += [(node, index), *inner_carries]
            else:
                raise _Refused(f"read by {node.op}")
    return casts, carries


def _unchanged_state(loop: gs.Node, index: int, ctx: _Context) -> gs.Variable:
    """The body input of the Loop's state variable `index` (a Loop input), where the body gives
    it back unchanged and nobody reads its final value; else _Refused."""
    body = loop.attrs.get("body")
    if not isinstance(body, gs.Graph) or len(body.inputs) <= index or len(body.outputs) < index:
        raise _Refused("read by a Loop whose body does not match its inputs")
    state = body.inputs[index]
    if body.outputs[index - 1] is not state or sum(o is state for o in body.outputs) != 1:
        raise _Refused("read by a Loop as a state its body changes")
    final = loop.outputs[index - 2] if len(loop.outputs) > index - 2 else None
    if final is not None and (final.outputs or id(final) in ctx.outputs):
        raise _Refused("read by a Loop whose final value of it is read")
    return state


def _common_target(casts: list[gs.Node], dtype: int) -> int:
    targets = {node.attrs.get("to") for node in casts}
    if not casts:
        raise _Refused("read by no Cast")
    if len(targets) > 1:
        raise _Refused("Cast to several types: " + ", ".join(sorted(TYPE_NAMES.get(t, str(t)) for t in targets)))
    to = targets.pop()
    if (dtype, to) not in NARROWER:
        raise _Refused(f"Cast from {TYPE_NAMES[dtype]} to {TYPE_NAMES.get(to, str(to))}: not a narrowing taken")
    return to


def cast_values(values: np.ndarray, to: int) -> np.ndarray:
    """`values` as onnxruntime's Cast to `to` (FLOAT16, BFLOAT16: bit patterns as uint16, or
    FLOAT) computes them: round to nearest, ties to even; a value past the narrow type's range
    becomes an infinity; subnormal results kept. _Refused for a NaN: its bits after the Cast are
    onnxruntime's choice."""
    _check_nan(values)
    if to in (FLOAT16, FLOAT):
        with np.errstate(over="ignore"):  # past the range: an infinity, as the Cast gives
            return values.astype(np.float16 if to == FLOAT16 else np.float32)
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    # bfloat16 is float32's upper half: add half of the lower half's range, the odd bit breaking ties
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def _check_nan(values: np.ndarray) -> None:
    if np.isnan(values).any():
        raise _Refused("holds a NaN (the Cast's NaN bits are onnxruntime's choice)")


def _narrow_nbytes(site: ConstantSite, to: int) -> int:
    return site.num_elements * NARROWER[(site.onnx_dtype, to)]


def _numpy_type(to: int):
    """The dtype gs writes for a tensor of type `to` (an ONNX enum where numpy has none)."""
    return {FLOAT16: np.float16, FLOAT: np.float32}.get(to, to)


def _narrow_constant(name: str, values: np.ndarray, shape: tuple[int, ...], to: int) -> gs.Constant:
    if to != BFLOAT16:
        return gs.Constant(name, c_order(values.reshape(shape)))
    # gs cannot export a bfloat16 numpy array: a raw TensorProto, as half_width does
    proto = onnx.helper.make_tensor(name, BFLOAT16, list(shape), values.tobytes(), raw=True)
    return gs.Constant(name, LazyValues(proto))


def _store(site: ConstantSite, found: _Found, names: NameAllocator) -> int:
    """The site stored narrow, loop states retyped, Casts removed where they may be; returns
    how many Casts stay (as no-ops)."""
    to, dtype = found.to, _numpy_type(found.to)
    narrow = _narrow_constant(names.new(f"{site.name}_{TYPE_NAMES[to]}"), found.values, site.shape, to)
    found.values = None
    if site.node is None:
        for node in {id(n): n for n in site.value.outputs}.values():
            for i, t in enumerate(node.inputs):
                if t is site.tensor:
                    node.inputs[i] = narrow
    else:  # a Constant node: its value narrow, its output of the narrow type
        site.node.attrs["value"] = narrow
        site.value.dtype = dtype
    for loop, index in found.carries:
        body = loop.attrs["body"]
        body.inputs[index].dtype = dtype  # also the body output: the same tensor
        if len(loop.outputs) > index - 2:
            loop.outputs[index - 2].dtype = dtype
    return sum(not _remove_cast(cast, found.graph_of) for cast in found.casts)


def _remove_cast(cast: gs.Node, graph_of: dict[int, gs.Graph]) -> bool:
    """Readers of the (now no-op) Cast's output read its input instead, where all of them are in
    the Cast's own graph and the output is no graph output; the Cast is then left dead for the
    pipeline's cleanup. False where it stays."""
    out, source, graph = cast.outputs[0], cast.inputs[0], graph_of[id(cast)]
    if any(o is out for o in graph.outputs):
        return False
    if any(graph_of.get(id(reader)) is not graph for reader in out.outputs):
        return False  # read from a subgraph, by name: keep the name
    replace_uses(out, source)
    cast.inputs.clear()
    return True
