"""Nodes that compute each sample of their output from that sample alone, at any batch
(readers.py: not readers a batch can break, so their being new keeps no batch-2 sample): a
constant scale that never lines up with axis 0, a Conv over constant weights, two such paths
from one tensor joined. Works on readers.py's node tuples (domain, op, inputs, outputs, ...) and
attribute values as readers._plain writes them (integer lists as ("i", (n,), values)).
"""

from __future__ import annotations


def per_sample(reached: set, nodes, readers, flowing, shape_of, attributes, describe=None) -> set:
    """The nodes of `reached` that compute sample n of their output from sample n (axis 0) of
    what they read, whatever the batch: channel scales (_channel_scale); a Conv whose weights
    and bias are constants (a Conv computes each sample alone, by its definition: the lean
    forms' zero-point Convs over a Conv's input, eeg_spindles); and an Add, Sub or Mul of two
    activations computed so from one same tensor (the Conv's output and its zero-point
    correction: both of its rank, axis 0 against axis 0). With `describe` (readers.py's), the
    asymmetric scaled MatMul's too: a MatMul over a constant [K, N] weight (each row of A its
    row), the sum of A's rows beside it (_row_sum) and the zero points' and columns' scales
    along N (tumor_vgg16: its batch-2 runs were two thirds of verification's)."""
    made_by = {name: index for index, node in enumerate(nodes) for name in node[3]}
    known: dict = {}  # _rank's answers, shared: a residual stream's Adds are asked about at every layer
    sums = set() if describe is None else {i for i in reached if _row_sum(i, nodes, readers, flowing, shape_of,
                                                                            describe, made_by)}
    alone = {i for i in reached if _channel_scale(i, nodes, readers, made_by, flowing, shape_of, attributes, known,
                                                  sums)}
    if describe is not None:
        alone |= sums | {i for i in reached if _matrix(nodes[i], flowing, shape_of, nodes, made_by)}
    alone |= {i for i in reached if nodes[i][:2] == ("", "Conv") and nodes[i][2][:1] and nodes[i][2][0] in flowing
              and not any(name in flowing for name in nodes[i][2][1:])}

    def source(name: str) -> str:  # the tensor `name` is computed from, sample by sample
        for _ in range(64):
            index = made_by.get(name)
            if index not in alone:
                return name
            name = next(n for n in nodes[index][2] if n in flowing)
        return name
    joins = {i for i in reached - alone if nodes[i][:2] in (("", "Add"), ("", "Sub"), ("", "Mul"))
             and len(nodes[i][2]) == 2 and all(name in flowing for name in nodes[i][2])
             and any(made_by.get(name) in alone for name in nodes[i][2])
             and source(nodes[i][2][0]) == source(nodes[i][2][1])}
    return alone | joins


def _channel_scale(index: int, nodes, readers, made_by, flowing, shape_of, attributes, known, sums=()) -> bool:
    """Whether node `index` multiplies, divides, adds or subtracts a constant of lower rank than
    the activation it reads (so that broadcasting never lines the constant up with axis 0: each
    sample takes it alike at any batch), or one varying along a MatMul's or Gemm's constant
    columns only (the last axis). The activation's rank is known from a Conv it comes from or
    goes to (its attributes' spatial rank + 2), through elementwise nodes (_rank). The lean
    forms' per-channel scales and equalization's input scales add such nodes (tumor_vgg16's
    Convs, [C, 1, 1] on [N, C, H, W]); a constant of another shape, or an activation of unknown
    rank, is not one (the sample is kept)."""
    domain, op, inputs, outputs, _ = nodes[index]
    if domain or op not in _ELEMENTWISE or len(inputs) != 2 or len(outputs) != 1:
        return False
    moving = [name in flowing for name in inputs]
    if moving not in ([True, False], [False, True]) or op in ("Div", "Sub") and not moving[0]:
        return False
    activation, constant = (inputs[0], inputs[1]) if moving[0] else (inputs[1], inputs[0])
    shape = shape_of(constant)
    if shape is None:
        return False
    varying = [axis for axis, d in enumerate(shape) if d != 1]
    if not varying and len(shape) <= 1:
        return True  # one number for everything, of no higher rank than any activation
    rank = _rank(activation, nodes, made_by, flowing, shape_of, attributes, known=known)
    if rank is None:  # a Conv reading the output: of the activation's rank, the constant's being lower
        rank = _reader_conv_rank(outputs[0], nodes, readers, flowing, shape_of, attributes)
    if rank is not None and (len(shape) < rank or not varying and len(shape) == rank):
        return True
    # (a vector: no higher rank than the activation, so that its axes stay where they were)
    if len(shape) != 1 or op not in ("Mul", "Div"):
        return False
    # the last axis: a constant weight's columns made it (MatMul, Gemm), or its rows read it (an
    # input scale in front of MatMul's A, or Gemm's not transposed): the weight's size, not a batch
    producer = made_by.get(activation)
    if producer is not None and (_weighted(nodes[producer], flowing) or producer in sums):
        return True  # (a row sum's last axis is 1: the vector makes it N)
    if producer is not None and nodes[producer][:2] in (("", "Add"), ("", "Sub")) and any(
            made_by.get(name) is not None and _matrix(nodes[made_by[name]], flowing, shape_of, nodes, made_by)
            for name in nodes[producer][2] if name in flowing):
        return True  # a weighted MatMul's output joined with its correction: its last axis is still N
    return any(nodes[i][2][:1] == [outputs[0]] and _weighted(nodes[i], flowing)
               and (nodes[i][1] == "MatMul" or attributes(i).get("transA", 0) == 0)
               for i in readers.get(outputs[0], ()))


def _reader_conv_rank(name, nodes, readers, flowing, shape_of, attributes, depth: int = 0) -> int | None:
    """The rank of a Conv reading `name` as its X, directly or through channel scales (a Mul by a
    constant of lower rank in front of it: equalization's input scales), or None. Through them
    too: terrain_diffusion int4's GroupNorm biases, each read by a Conv through the scale the
    quantizer put there, kept its batch-2 sample (CPU 3.3 -> 2.65 s a run without it)."""
    for i in readers.get(name, ()):
        domain, op, inputs, outputs, _ = nodes[i]
        if (domain, op) == ("", "Conv") and inputs[:1] == [name]:
            r = _conv_rank(attributes(i))
            if r:
                return r
        if (not domain and op == "Mul" and len(inputs) == 2 and len(outputs) == 1 and depth < 2
                and sum(n in flowing for n in inputs) == 1):
            constant = inputs[1] if inputs[0] == name else inputs[0]
            r = _reader_conv_rank(outputs[0], nodes, readers, flowing, shape_of, attributes, depth + 1)
            shape = shape_of(constant)
            if r and shape is not None and len(shape) < r:
                return r
    return None


def _weighted(node, flowing) -> bool:
    """A MatMul or Gemm whose B is a constant (a weight)."""
    return node[:2] in (("", "MatMul"), ("", "Gemm")) and len(node[2]) > 1 and node[2][1] not in flowing


def _matrix(node, flowing, shape_of, nodes=None, made_by=None) -> bool:
    """A MatMul whose B is a constant matrix [K, N] (or computed from constants: _constant_rank):
    row n of its output from row n of A."""
    return (node[:2] == ("", "MatMul") and len(node[2]) == 2 and node[2][0] in flowing and node[2][1] not in flowing
            and _constant_rank(node[2][1], shape_of, nodes, made_by) == 2)


def _constant_rank(name: str, shape_of, nodes, made_by, depth: int = 0) -> int | None:
    """A constant's rank, or that of one computed from constants through a Reshape (its shape's
    length), a Cast, an Identity or a DequantizeLinear (the lowerings' weights); None otherwise."""
    shape = shape_of(name)
    if shape is not None:
        return len(shape)
    index = None if made_by is None or depth > 8 else made_by.get(name)
    if index is None or nodes[index][0] or not nodes[index][2]:
        return None
    op, inputs = nodes[index][1], nodes[index][2]
    if op == "Reshape" and len(inputs) == 2:
        shape = shape_of(inputs[1])
        return shape[0] if shape is not None and len(shape) == 1 else None
    if op in ("Cast", "Identity", "DequantizeLinear"):
        return _constant_rank(inputs[0], shape_of, nodes, made_by, depth + 1)
    return None


def _row_sum(index: int, nodes, readers, flowing, shape_of, describe, made_by) -> bool:
    """A ReduceSum or ReduceMean over the last axis only, dims kept, of a tensor that a MatMul
    over a constant [K, N] weight reads as A: that axis is the weight's K, never the batch."""
    domain, op, inputs, _, _ = nodes[index]
    if domain or op not in ("ReduceSum", "ReduceMean") or not inputs or inputs[0] not in flowing:
        return False
    named = dict(describe(index, flowing)[2])
    if named.get("axes") != ("i", (1,), (-1,)) or named.get("keepdims", 1) != 1:
        return False
    return any(nodes[j][2][:1] == [inputs[0]] and _matrix(nodes[j], flowing, shape_of, nodes, made_by)
               for j in readers[inputs[0]])


_ELEMENTWISE = ("Mul", "Div", "Add", "Sub")
_UNARY = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "Identity", "Cast", "Erf", "Abs", "Neg", "Exp",
          "Sqrt", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus", "PRelu")


def _rank(name: str, nodes, made_by, flowing, shape_of, attributes, depth: int = 0, known=None) -> int | None:
    """The rank of activation `name` where the graph says it: a Conv's output (its spatial rank
    + 2), or an elementwise node's over activations of one known rank and constants of no
    higher; None otherwise. `known`: the ranks found so far (a residual stream's Adds read it
    twice at each step)."""
    known = {} if known is None else known
    if name not in known:
        known[name] = _find_rank(name, nodes, made_by, flowing, shape_of, attributes, depth, known)
    return known[name]


def _find_rank(name, nodes, made_by, flowing, shape_of, attributes, depth, known) -> int | None:
    index = made_by.get(name)
    if index is None or depth > 64:
        return None
    domain, op, inputs, _, _ = nodes[index]
    if domain:
        return None
    if op == "Conv":
        return _conv_rank(attributes(index))
    if op not in _UNARY and op not in _ELEMENTWISE:
        return None
    moving = [n for n in inputs[:1 if op in _UNARY else 2] if n in flowing]
    ranks = {_rank(n, nodes, made_by, flowing, shape_of, attributes, depth + 1, known) for n in moving}
    if len(ranks) != 1 or None in ranks:
        return None
    rank = ranks.pop()
    if op in _ELEMENTWISE:
        for n in inputs[:2]:
            if n not in flowing and (shape_of(n) is None or len(shape_of(n)) > rank):
                return None
    return rank


def _conv_rank(attributes: dict) -> int | None:
    spatial = _spatial_rank(attributes)
    return None if spatial is None else spatial + 2


def _spatial_rank(attributes: dict) -> int | None:
    """A Conv's spatial dimensions, from whichever attribute says (kernel_shape, strides,
    dilations, pads), or None."""
    for name in ("kernel_shape", "strides", "dilations"):
        value = attributes.get(name)
        if isinstance(value, tuple) and value and value[0] == "i":
            return value[1][0]
    pads = attributes.get("pads")
    if isinstance(pads, tuple) and pads and pads[0] == "i":
        return pads[1][0] // 2
    return None
