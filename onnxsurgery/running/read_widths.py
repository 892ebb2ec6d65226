"""The width a generated input's last axis must have: read from the first layer that contracts it.

A model whose inputs are all dynamic ([frames, features]: madmom's beat and note trackers) tells
nothing of its feature width in its declared shapes, but its first layer does: an LSTM's W is
[directions, gates x hidden, input_size], a MatMul's B is [K, N]. Following the input through the
ops that leave its last axis alone (Unsqueeze and Squeeze of other axes, a Cast, an elementwise
op with a constant or a computed tensor) to that layer gives the width, where 32 and 512 (feeds.LENGTHS) fail alike:
"Input W must have shape {1,100,32}. Actual:{1,100,314}".
"""

from __future__ import annotations

import onnx
import onnx.numpy_helper

PASSING = ("Identity", "Cast", "Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Dropout", "LeakyRelu", "Elu")
ELEMENTWISE = ("Add", "Sub", "Mul", "Div")
RECURRENT = ("LSTM", "GRU", "RNN")
DEPTH = 8  # ops followed from the input before giving up


def read_widths(model: onnx.ModelProto | None) -> dict[str, int]:
    """Float graph input -> the width its last axis must have, where the model's first layer
    reading it says (module doc); inputs it cannot tell are left out."""
    if model is None:
        return {}
    graph = model.graph
    dims = {t.name: list(t.dims) for t in graph.initializer}
    values = {t.name: t for t in graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL
              and len(t.dims) <= 1}
    for node in graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    dims[node.output[0]] = list(a.t.dims)
                    values[node.output[0]] = a.t
    for node in graph.node:  # a weight stored in 16 bits (or quantized) is read through its Cast
        if node.op_type in ("Cast", "DequantizeLinear") and node.input and node.input[0] in dims:
            dims.setdefault(node.output[0], dims[node.input[0]])
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, index))
    facts = _Facts(dims, values, readers)
    widths = {}
    for inp in graph.input:
        tensor = inp.type.tensor_type
        if inp.name in dims or tensor.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            continue
        rank = len(tensor.shape.dim)
        if rank and (width := facts.follow(inp.name, rank, DEPTH)):
            widths[inp.name] = width
    return widths


class _Facts:
    def __init__(self, dims, values, readers):
        self.dims, self.values, self.readers = dims, values, readers

    def follow(self, name: str, rank: int, depth: int) -> int | None:
        """The width the first contracting reader of `name` (of `rank` axes) asks for."""
        if depth == 0:
            return None
        for node, index in self.readers.get(name, []):
            width = self._through(node, index, rank, depth)
            if width:
                return width
        return None

    def _through(self, node: onnx.NodeProto, index: int, rank: int, depth: int) -> int | None:
        op = node.op_type
        weight = self.dims.get(node.input[1]) if len(node.input) > 1 else None
        if op == "MatMul" and index == 0 and weight and len(weight) >= 2:
            return weight[-2]
        if op == "Gemm" and index == 0 and weight and len(weight) == 2 and not _attr(node, "transA"):
            return weight[1] if _attr(node, "transB") else weight[0]
        if op in RECURRENT and index == 0 and weight and len(weight) == 3:
            return weight[2]
        if op in PASSING and index == 0:
            return self.follow(node.output[0], rank, depth - 1)
        if op in ELEMENTWISE:
            # with a constant or a computed partner (LORE's cell features plus their position
            # embeddings): the sum is as wide as its reader asks, and so may the input be, that
            # width or 1 being what broadcasting takes
            return self.follow(node.output[0], rank, depth - 1)
        if op in ("Unsqueeze", "Squeeze") and index == 0:
            axes = self._axes(node)
            if axes is None:
                return None
            after = rank + len(axes) if op == "Unsqueeze" else rank - len(axes)
            last = (after if op == "Unsqueeze" else rank) - 1
            if any(a % (after if op == "Unsqueeze" else rank) == last for a in axes):
                return None  # the last axis is added or removed
            return self.follow(node.output[0], after, depth - 1)
        return None

    def _axes(self, node: onnx.NodeProto) -> list[int] | None:
        for a in node.attribute:
            if a.name == "axes":
                return list(a.ints)
        if len(node.input) > 1 and node.input[1] in self.values:
            return [int(v) for v in onnx.numpy_helper.to_array(self.values[node.input[1]]).reshape(-1)]
        return None


def _attr(node: onnx.NodeProto, name: str) -> int:
    return next((a.i for a in node.attribute if a.name == name), 0)
