"""A comparison's sessions run a ConvInteger as a float Conv where that computes the same integers
bit for bit (`float_convs`): the file is not changed, only what onnxruntime is given to run it.

Why: onnxruntime's ConvInteger is im2col and an integer GEMM, 92% of the kernel time of
lectura_hifigan_int8's runs (onnxruntime's profiler; 74 of them, as quantize_dynamic ships them),
where its float Conv takes the blocked layout's direct kernels: the 3 tune clips' runs 2.93-3.23 ->
0.83-0.91 s of CPU (round 35, inputs16), the same outputs to the bit.

Why it is exact: x - x_zero_point lies in [-255, 255] (8-bit x, padding takes the zero point:
conv_integer.cc's im2col), and w - w_zero_point is a constant. Each partial sum of an output of
filter m is then an integer of magnitude at most 255 * sum_k |w[m, k] - w_zero_point|; where that
is at most 2**24, every such integer is a float32, so each product and each addition in any order
is exact, and the float result Cast to int32 is ConvInteger's. A ConvInteger whose filters exceed it, or
whose weight or zero points are not initializers, stays as it is."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# float32 represents every integer up to this magnitude
EXACT = 1 << 24

# the largest 8-bit value less another's: |x - x_zero_point| for uint8 or int8 x
SPAN = 255

# the float weights added (4 bytes per element) stay within this; larger files run as they are
FLOAT_BYTES = 64 << 20


def float_convs(model) -> onnx.ModelProto | None:
    """`model` (a path) with each ConvInteger of its main graph that a float Conv computes exactly
    replaced by Cast, Sub, Conv, Cast (module doc), or None where none is, where the file
    keeps weights outside itself, or where the float weights would pass FLOAT_BYTES."""
    if isinstance(model, onnx.ModelProto):
        return None
    from .feeds import _structure

    try:
        if os.path.getsize(model) > FLOAT_BYTES:  # before any parse: a large file's is not needed
            return None
    except OSError:
        return None
    structure = _structure(model)
    if structure is None or not any(n.op_type == "ConvInteger" and n.domain in ("", "ai.onnx")
                                    for n in structure.graph.node):
        return None
    try:
        proto = onnx.load(str(model), load_external_data=False)
    except (OSError, ValueError, onnx.onnx_cpp2py_export.checker.ValidationError):
        return None
    graph = proto.graph
    if any(t.data_location == TensorProto.EXTERNAL for t in graph.initializer):
        return None
    initializers = {t.name: t for t in graph.initializer}
    uint8 = _uint8_values(graph)
    nodes, added, held = [], [], 0
    for node in graph.node:
        replaced = _replaced(node, initializers, uint8, added)
        nodes.extend(replaced if replaced is not None else [node])
        if replaced is not None:
            held += int(np.prod(added[-1].dims)) * 4
            if held > FLOAT_BYTES:
                return None
    if not added:
        return None
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    return proto


def _replaced(node, initializers: dict, uint8: set, added: list) -> list | None:
    """The nodes that compute `node`'s output exactly in float, or None (module doc). Only the
    kinds onnxruntime's own kernel runs (conv_integer.cc: uint8 x, a uint8 or int8 weight, one zero
    point each): a ConvInteger it would refuse is not made to run here."""
    if node.op_type != "ConvInteger" or node.domain not in ("", "ai.onnx"):
        return None
    x, w, x_zero, w_zero = (list(node.input) + [""] * 4)[:4]
    kinds = (TensorProto.UINT8, TensorProto.INT8)
    if x not in uint8 or w not in initializers or initializers[w].data_type not in kinds:
        return None
    if x_zero in initializers and (initializers[x_zero].data_type != TensorProto.UINT8
                                   or int(np.prod(initializers[x_zero].dims)) != 1):
        return None
    if w_zero and (w_zero not in initializers or int(np.prod(initializers[w_zero].dims)) != 1):
        return None
    weight = numpy_helper.to_array(initializers[w]).astype(np.int64)
    if weight.ndim < 3:
        return None
    if w_zero:
        weight = weight - numpy_helper.to_array(initializers[w_zero]).astype(np.int64).reshape(())
    if SPAN * int(np.abs(weight).reshape(weight.shape[0], -1).sum(axis=1).max(initial=0)) > EXACT:
        return None
    tag = node.output[0]
    float_weight = numpy_helper.from_array(weight.astype(np.float32), f"{tag}__float_w")
    added.append(float_weight)
    out = [helper.make_node("Cast", [x], [f"{tag}__float_x"], to=TensorProto.FLOAT)]
    shifted = f"{tag}__float_x"
    if x_zero:
        out += [helper.make_node("Cast", [x_zero], [f"{tag}__float_zero"], to=TensorProto.FLOAT),
                helper.make_node("Sub", [shifted, f"{tag}__float_zero"], [f"{tag}__float_shifted"])]
        shifted = f"{tag}__float_shifted"
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    # the float sum is the integer itself (module doc): Cast gives it whole, no rounding needed
    out += [helper.make_node("Conv", [shifted, float_weight.name], [f"{tag}__float_y"],
                             name=f"{node.name}__float" if node.name else "", **attributes),
            helper.make_node("Cast", [f"{tag}__float_y"], [tag], to=TensorProto.INT32)]
    return out


def _uint8_values(graph) -> set[str]:
    """Values of `graph` known to be uint8: DynamicQuantizeLinear's outputs, and graph inputs,
    initializers and value_info declared so."""
    known = {n.output[0] for n in graph.node if n.op_type == "DynamicQuantizeLinear" and n.domain in ("", "ai.onnx")}
    known |= {t.name for t in graph.initializer if t.data_type == TensorProto.UINT8}
    known |= {v.name for v in [*graph.input, *graph.value_info]
              if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == TensorProto.UINT8}
    return known


def as_run(model, options: dict):
    """What a comparison's session of `model` loads: float_convs' copy where it has one and the
    session takes the file whole (a path: not an npy.NpyModel, whose arrays come with it; no
    extra outputs, branches, twins, stub or streaming), else `model` itself."""
    if (not isinstance(model, (str, Path)) or not Path(model).is_file() or options.get("twins", 1) > 1
            or options.get("extra_outputs") or options.get("branches") or options.get("initializers")
            or options.get("payloads_beside") is not None or options.get("streamed")
            or options.get("runtime", "onnxruntime") != "onnxruntime"):
        return model
    return float_convs(model) or model
