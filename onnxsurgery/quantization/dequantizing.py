"""A quantized model's own 8-bit weights dequantized by Cast -> (Sub) -> Mul, rewritten so that
they stay 8-bit at load (choices/dequantized.py decides where).

Before: q (int8/uint8 constant) -> Cast(to=float) [-> Sub(zero point)] -> Mul(scale) -> readers.
onnxruntime folds such a chain at session start into a float copy of the weight (the zoo's
all-MiniLM-L6-v2 shipped so: 226 MB of anonymous memory after session creation, more than its
float model), since Cast, Sub and Mul of constants are constants.

After, the same integers, scale and zero point:
- read by MatMul, Conv or any op: the Cast becomes DequantizeLinear(q, 1) (per tensor, in the
  Cast's type), which onnxruntime does not fold, so the Sub and Mul after it run at each
  inference too and nothing turns float at load. Measured on MiniLM (onnxruntime 1.32, 8
  sentences of 18 tokens, one thread): CPU per run 1.19x the shipped file's; per channel instead
  (DequantizeLinear(q, scale, zero point) and a Reshape, which keeps onnxruntime from fusing it
  into MatMulNBits and its int8 activations, 0.041 relative L2) 1.46x: its per-channel kernel is
  not vectorized (lowerings/dq_float.py). Without the Reshape the fusion moved the output.
- read only as the data of Gather(axis 0), the scale per row or per tensor: the rows gathered first,
  Gather(q) -> Cast [-> Sub(Gather(zero point))] -> Mul(Gather(scale)): only the rows read are
  turned into float.

Exact: q dequantized with scale 1 is the Cast's value, and the Sub and Mul are the chain's own; the
rows gathered first get the same products. With graph optimizations off, the outputs are bitwise
those of the original; with them on, onnxruntime packs a constant MatMul weight (the original's,
folded) but not a computed one, and the two kernels differ in the last bits (MiniLM: 7.6e-7
relative L2). Limits: a float16 or bfloat16 Cast before opset 19 (DequantizeLinear's float16
output) is left as it is; rows are gathered first only where the scale and zero point are
constants per row or per tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import NameAllocator, constant_values, iter_scopes
from .nodes import Emitter, const

OUTPUT_TYPES = {onnx.TensorProto.FLOAT: 10, onnx.TensorProto.FLOAT16: 19, onnx.TensorProto.BFLOAT16: 19}


@dataclass
class Chain:
    """One Cast -> (Sub) -> Mul of an 8-bit constant `q`, the Mul's output read by its readers."""

    q: gs.Constant
    cast: gs.Node
    sub: gs.Node | None
    mul: gs.Node
    scale: gs.Tensor
    zero: gs.Tensor | None


def chains_of(scale: gs.Tensor) -> list[Chain]:
    """Each chain in which `scale` is the Mul's scale (none where it is a zero point)."""
    found = []
    for mul in scale.outputs:
        if mul.op != "Mul" or len(mul.inputs) != 2:
            continue
        other = mul.inputs[1] if mul.inputs[0] is scale else mul.inputs[0]
        producer = other.inputs[0] if len(other.inputs) == 1 else None
        sub = zero = None
        if producer is not None and producer.op == "Sub" and len(producer.inputs) == 2:
            sub, zero = producer, producer.inputs[1]
            other = producer.inputs[0]
            producer = other.inputs[0] if len(other.inputs) == 1 else None
        if producer is not None and producer.op == "Cast" and isinstance(producer.inputs[0], gs.Constant):
            found.append(Chain(producer.inputs[0], producer, sub, mul, scale, zero))
    return found


def refusal(chain: Chain, opset: int) -> str | None:
    """Why `chain` cannot be rewritten at `opset`, or None (module doc)."""
    if np.dtype(chain.q.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)):
        return "not 8-bit integers"
    to = chain.cast.attrs.get("to")
    if OUTPUT_TYPES.get(to, 99) > opset:
        return f"DequantizeLinear to {onnx.TensorProto.DataType.Name(to)} needs opset {OUTPUT_TYPES.get(to, '-')}"
    return None


def _axis(chain: Chain, scale: np.ndarray, zero: np.ndarray) -> int | None | bool:
    """The one axis of q that the scale and zero point vary along; None per tensor; False where
    they vary along several or do not broadcast into q's shape."""
    shape = tuple(chain.q.shape)
    try:
        both = np.broadcast_shapes(scale.shape, zero.shape)
    except ValueError:
        return False
    if len(both) > len(shape):
        return False
    both = (1,) * (len(shape) - len(both)) + tuple(both)
    varying = [i for i, n in enumerate(both) if n != 1]
    if any(both[i] != shape[i] for i in varying) or len(varying) > 1:
        return False
    return varying[0] if varying else None


def gathered(chain: Chain, graph: gs.Graph) -> list[gs.Node] | None:
    """The Gather nodes of `graph` reading the chain's weight as their data (axis 0), where they are
    its only readers and the scale and zero point hold one value per row or per tensor; else None."""
    readers, here = list(chain.mul.outputs[0].outputs), {id(n) for n in graph.nodes}
    if not readers or any(n.op != "Gather" or n.inputs[0] is not chain.mul.outputs[0] or n.attrs.get("axis", 0) != 0
                          or id(n) not in here for n in readers):
        return None
    scale = constant_values(chain.scale)
    zero = constant_values(chain.zero) if chain.zero is not None else np.zeros((), getattr(scale, "dtype", None))
    if scale is None or zero is None or not chain.q.shape:
        return None
    return readers if _axis(chain, scale, zero) in (None, 0) else None


def rewrite(chain: Chain, graph: gs.Graph, names: NameAllocator) -> None:
    """Rewrite `chain`, whose Mul is a node of `graph`, in place (module doc); the Cast and Sub
    are left to cleanup."""
    rows = gathered(chain, graph)
    if rows is not None:
        zero = constant_values(chain.zero) if chain.zero is not None else None
        return _gather_first(chain, graph, rows, constant_values(chain.scale), zero, names)
    cast = chain.cast
    if cast.op == "Cast":  # not rewritten yet for another chain reading the same integers
        to = onnx.helper.tensor_dtype_to_np_dtype(cast.attrs["to"])
        unit = const(names, f"{chain.q.name}_unit", np.ones((), to))
        cast.op, cast.attrs = "DequantizeLinear", {}
        cast.inputs.append(unit)


def _gather_first(chain: Chain, graph: gs.Graph, readers: list[gs.Node], scale: np.ndarray, zero: np.ndarray | None,
                  names: NameAllocator) -> None:
    """Each Gather reads the integers; its output is the rows' Cast [- zero point] * scale."""
    base, to = chain.q.name, chain.cast.attrs["to"]
    per_row = lambda a: a.reshape((a.shape[0],) + (1,) * (len(chain.q.shape) - 1)) \
        if a.ndim and a.size > 1 else a.reshape(())  # noqa: E731
    scale = _shaped(chain.scale, per_row(_full_rank(scale, chain)), names, f"{base}_row_scale")
    if zero is not None:
        zero = _shaped(chain.zero, per_row(_full_rank(zero, chain)), names, f"{base}_row_zero")
    for gather in readers:
        _rows_of(gather, chain, graph, scale, zero, to, names)


def _rows_of(gather: gs.Node, chain: Chain, graph: gs.Graph, scale: gs.Constant, zero: gs.Constant | None, to: int,
             names: NameAllocator) -> None:
    """`gather` made to read the integers; its output computed from the rows it reads."""
    out, ids = gather.outputs[0], gather.inputs[1]
    emit = Emitter(graph, names, out.name)

    def of_rows(tensor: gs.Constant) -> gs.Tensor:
        return tensor if int(np.prod(tensor.shape)) == 1 else emit("Gather", [tensor, ids], tensor.dtype, axis=0)

    gather.outputs[0] = gs.Variable(names.new(f"{out.name}__q"), dtype=chain.q.dtype)
    gather.inputs[0] = chain.q
    value = emit("Cast", [gather.outputs[0]], scale.dtype, to=to)
    if zero is not None:
        value = emit("Sub", [value, of_rows(zero)], scale.dtype)
    graph.nodes.append(gs.Node("Mul", name=names.new(f"{out.name}__Mul"), inputs=[value, of_rows(scale)],
                               outputs=[out]))


def _shaped(tensor: gs.Tensor, values: np.ndarray, names: NameAllocator, base: str) -> gs.Tensor:
    """`tensor` itself where it is a constant of that shape already (a row scale [V, 1]); else a new one."""
    if isinstance(tensor, gs.Constant) and tuple(tensor.shape) == values.shape:
        return tensor
    return const(names, base, values.copy())


def _full_rank(values: np.ndarray, chain: Chain) -> np.ndarray:
    """`values` with q's rank (broadcasting's leading ones added)."""
    return values.reshape((1,) * (len(chain.q.shape) - values.ndim) + values.shape)


def rewrite_planned(graph: gs.Graph, plan, names: NameAllocator) -> int:
    """Rewrite the chains of the scales whose float record has lowering "dq" (apply.py's hook);
    returns how many."""
    scales = {w.name for w in plan.weights if w.dtype == "float" and w.lowering == "dq"}
    done = 0
    for scope in list(iter_scopes(graph)) if scales else ():
        for node in list(scope.graph.nodes):
            if node.op != "Mul":
                continue
            for chain in (c for tensor in node.inputs if tensor.name in scales for c in chains_of(tensor)):
                if chain.mul is node and refusal(chain, plan.opset) is None:
                    rewrite(chain, scope.graph, names)
                    done += 1
                    break
    return done
