"""A static check of a model against what TensorRT's ONNX parser (onnx-tensorrt) takes, without
TensorRT: every node's op, its main data type, and the attributes and inputs the parser's
operator list restricts. The list (onnx_tensorrt_operators.json beside this file) is
onnx-tensorrt's docs/operators.md for one TensorRT release, restated as data with its source
and the date it was taken.

What it finds is what the parser would refuse, or what builds only with a plugin; what it
cannot know (shapes that turn out dynamic, tactics, GPU memory) needs a real engine build
(`trtexec --onnx=...`). Rules checked beyond the list's op and type columns:

- 8- and 4-bit integers (and FP8/FP4) are TensorRT's quantized types: a tensor of one of them
  may only be read by DequantizeLinear (integer arithmetic on weights, such as quant's default
  Cast -> Mul lowering, is refused), and UINT8 only as a network input or output;
- DequantizeLinear, as TensorRT's documentation states (TensorRT 10.x, "Working with Quantized
  Types" and its "Quantization Schemes" section; each finding names the page): scale a build-time
  constant of positive values, zero point absent or a constant of zeros (symmetric); INT4 only as
  a weight (an initializer) in blocks; blocks (attribute block_size, opset 21) of 64 or 128, on
  INT4 2-D weights, along the last or second-to-last dimension; QuantizeLinear: zero point 0;
- a weight's DequantizeLinear read by one node only: one per reader, as onnxruntime's quantizer
  writes for TensorRT (DedicatedQDQPair, "in TRT, QDQ pair can't be shared between nodes") and
  Model Optimizer does (it duplicates shared constants before quantizing); docs/limits.md;
- the attributes and constant inputs the list names (LSTM input_forget and layout, pooling
  dilations, Resize modes, TopK sorted, ScatterND reduction, Reduce* axes, Constant's
  sparse and string values, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

OPERATORS_FILE = Path(__file__).with_name("onnx_tensorrt_operators.json")
T = onnx.TensorProto
_TYPE_NAMES = {T.FLOAT: "FP32", T.FLOAT16: "FP16", T.BFLOAT16: "BF16", T.DOUBLE: "FP64", T.INT32: "INT32",
               T.INT64: "INT64", T.INT8: "INT8", T.UINT8: "UINT8", T.BOOL: "BOOL", T.INT4: "INT4",
               T.FLOAT8E4M3FN: "FP8", T.FLOAT4E2M1: "FP4"}
_QUANTIZED = {"INT8", "INT4", "FP8", "FP4"}
# Where a tensor of a quantized type may be read: DequantizeLinear's data and zero point,
# QuantizeLinear's zero point (which gives its output type).
_QUANTIZED_READERS = {("DequantizeLinear", 0), ("DequantizeLinear", 2), ("QuantizeLinear", 2)}
# Ops whose list entry is about their output's type (they have no data input), or whose first
# input is not the data (Where's condition; control flow).
_TYPE_FROM_OUTPUT = {"Constant", "ConstantOfShape", "RandomNormal", "RandomUniform", "EyeLike"}
_DATA_INPUT = {"Where": 1}
_NO_TYPE_CHECK = {"If", "Loop", "Scan", "Shape", "Size"}
_REDUCE_AXES_INPUT = {"ReduceSum": 13}  # the other Reduce* ops take axes as an input from opset 18
_RESIZE = {"mode": ("nearest", "linear"),
           "coordinate_transformation_mode": ("half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn",
                                              "asymmetric", "align_corners"),
           "nearest_mode": ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil"),
           "keep_aspect_ratio_policy": ("stretch",)}


# Where TensorRT's documentation states the quantization rules checked here (release 10.x).
QUANTIZED_TYPES_PAGE = 'TensorRT 10.x, "Working with Quantized Types"'
SCHEMES_PAGE = 'TensorRT 10.x, "Working with Quantized Types" > "Quantization Schemes"'
BLOCK_SIZES = (64, 128)  # "the supported block sizes are 64 and 128"
BLOCK_OPSET = 21  # DequantizeLinear's block_size attribute (and INT4) come with opset 21
SHARED_DQ = ("a weight's DequantizeLinear shared by several readers: TensorRT takes one per reader (a Q/DQ pair "
             "is not shared between nodes in TensorRT: onnxruntime's DedicatedQDQPair; Model Optimizer "
             "duplicates shared constants); quant --target tensorrt writes one per reader")

# What `shrink --target tensorrt` says when it merged constants (docs/limits.md).
MERGING_NOTE = ("for TensorRT: merged constants are read by several layers, which onnx-tensorrt imports once; "
                "DequantizeLinear nodes are not merged, so a quantized weight keeps one per reader, as TensorRT "
                "takes it; the engine's size was not measured. TensorRT 10.16's weakly typed FP16 builds have "
                "failed on an initializer read by several nodes (duplicate '<weight>_output_casted' tensors): "
                "build strongly typed, or shrink with a --min-elements above that weight's size")


@dataclass(frozen=True)
class Finding:
    """One thing TensorRT's parser would refuse: the node (name and op) and why."""

    op: str
    node: str
    problem: str
    # about a quantized activation (a static quantizer's QuantizeLinear / DequantizeLinear of computed data, or
    # their zero point), not a weight: quant writes weights only, so `quant --target tensorrt` cannot change it
    activation: bool = False

    def __str__(self) -> str:
        where = f"{self.op} {self.node!r}" if self.node else self.op
        return f"{where}: {self.problem}"


@lru_cache(maxsize=1)
def operator_list() -> dict:
    """The checked-in operator list: release, opsets, source, retrieved, operators."""
    return json.loads(OPERATORS_FILE.read_text())


def check_tensorrt(model: onnx.ModelProto) -> list[Finding]:
    """What TensorRT's ONNX parser (the release in `operator_list()`) would refuse in `model`,
    in graph order; empty when nothing is found. Types come from onnx's shape inference."""
    listing = operator_list()
    findings = []
    low, high = listing["opsets"]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and not low <= opset <= high:
        findings.append(Finding("model", "", f"opset {opset} is outside {listing['release']}'s range {low}-{high}"))
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # types of node outputs stay unknown; inputs and constants still count
        inferred = model
    main = inferred.graph
    boundary = {v.name for v in list(main.input) + list(main.output)}
    _check_graph(main, listing, opset or 0, {}, {}, boundary, findings)
    return findings


def _check_graph(graph: onnx.GraphProto, listing: dict, opset: int, outer_types: dict, outer_constants: dict,
                 boundary: set[str], findings: list[Finding]) -> None:
    types = dict(outer_types)
    constants = dict(outer_constants)
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.HasField("tensor_type"):
            types[v.name] = v.type.tensor_type.elem_type
    for init in graph.initializer:
        types[init.name] = init.data_type
        constants[init.name] = init
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                types[node.output[0]] = value.data_type
                constants[node.output[0]] = value
    weights = _from_constants(graph, constants)
    activation_zero_points = {node.input[2] for node in graph.node if node.op_type in ("QuantizeLinear",
                              "DequantizeLinear") and len(node.input) > 2 and node.input[0] not in weights}
    for name, dtype in types.items():
        if _TYPE_NAMES.get(dtype) == "UINT8" and name in constants and name not in boundary:
            findings.append(Finding("model", "", f"UINT8 tensor {name!r}: TensorRT takes UINT8 only as a "
                                    "network input or output", activation=name in activation_zero_points))
            break
    readers = _readers(graph)
    for node in graph.node:
        computed = node.op_type in ("QuantizeLinear", "DequantizeLinear") and bool(node.input) and \
            node.input[0] not in weights  # a quantized activation's pair, not a weight's
        findings.extend(replace(f, activation=computed) for f in _check_node(node, listing, opset, types, constants))
        if node.op_type == "DequantizeLinear" and node.input and node.input[0] in constants and \
                readers.get(node.output[0], 0) > 1:
            findings.append(Finding(node.op_type, node.name, f"output read by {readers[node.output[0]]} nodes: "
                                    + SHARED_DQ))
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _check_graph(sub, listing, opset, types, constants, boundary, findings)


# Ops that move or select a tensor's values without computing new ones (their data: input 0): a quantized
# table read by Gather, then DequantizeLinear (quantize_dynamic's embeddings), is still a weight.
_MOVES = {"Gather", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Slice", "Flatten", "Identity", "Expand"}


def _from_constants(graph: onnx.GraphProto, constants: dict) -> set[str]:
    """The names of `graph`'s constants and of what only moves their values (_MOVES), in graph order."""
    names = set(constants)
    for node in graph.node:
        if node.op_type in _MOVES and node.input and node.input[0] in names:
            names.update(node.output)
    return names


def _readers(graph: onnx.GraphProto) -> dict[str, int]:
    """Tensor name -> how many nodes of `graph` read it, a node with subgraphs counted once for
    every name it or its subgraphs read."""
    counts: dict[str, int] = {}
    for node in graph.node:
        for name in _names_read(node):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _names_read(node: onnx.NodeProto) -> set[str]:
    names = {name for name in node.input if name}
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            for inner in sub.node:
                names |= _names_read(inner)
    return names


def _check_node(node: onnx.NodeProto, listing: dict, opset: int, types: dict, constants: dict):
    op, name = node.op_type, node.name
    if node.domain == "ai.onnx.ml":  # ONNX's own ML operators (trees, scalers, encoders): standard, not custom
        yield Finding(op, name, "an operator of ONNX's standard ai.onnx.ml domain, which TensorRT's ONNX parser does "
                      "not take (onnx-tensorrt lists none of that domain): run it in onnxruntime")
        return
    if node.domain not in ("", "ai.onnx"):
        yield Finding(op, name, f"custom op of domain {node.domain!r}: TensorRT builds it only with a plugin")
        return
    entry = listing["operators"].get(op)
    if entry is None:
        yield Finding(op, name, f"not in onnx-tensorrt's operator list for {listing['release']}")
        return
    if not entry["supported"]:
        yield Finding(op, name, f"not supported by {listing['release']}'s ONNX parser")
        return
    for index, tensor in enumerate(node.input):
        kind = _TYPE_NAMES.get(types.get(tensor))
        if kind in _QUANTIZED and (op, index) not in _QUANTIZED_READERS:
            yield Finding(op, name, f"reads {kind} tensor {tensor!r}: TensorRT takes {kind} only through "
                          "DequantizeLinear")
    allowed = set(entry["types"]) | ({"FP64"} if "FP32" in entry["types"] else set())  # FP64: cast down
    if op in ("Cast", "CastLike") and _attr(node, "to") is not None:
        to = _attr(node, "to")
        if _TYPE_NAMES.get(to) not in allowed:
            yield Finding(op, name, f"casts to {_type_name(to)}: TensorRT takes {', '.join(entry['types'])} here")
    dtype = _data_type(node, types)
    kind = _TYPE_NAMES.get(dtype)
    if dtype is not None and not (kind in _QUANTIZED and op != "DequantizeLinear") and kind not in allowed:
        yield Finding(op, name, f"{_type_name(dtype)} data: TensorRT takes {', '.join(entry['types'])} here")
    yield from _restrictions(node, opset, constants, types)


def _type_name(dtype: int) -> str:
    return _TYPE_NAMES.get(dtype) or onnx.TensorProto.DataType.Name(dtype)


def _data_type(node: onnx.NodeProto, types: dict) -> int | None:
    """The type of the tensor the list's "Supported Types" column is about, if known."""
    if node.op_type in _NO_TYPE_CHECK:
        return None
    if node.op_type in _TYPE_FROM_OUTPUT:
        tensor = node.output[0]
    else:
        index = _DATA_INPUT.get(node.op_type, 0)
        tensor = node.input[index] if len(node.input) > index else ""
    return types.get(tensor)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _constant(constants: dict, name: str) -> np.ndarray | None:
    """The value of a constant input, None when it is computed (or stored outside the file)."""
    proto = constants.get(name)
    if proto is None or proto.data_location == onnx.TensorProto.EXTERNAL:
        return None
    return numpy_helper.to_array(proto)


def _restrictions(node: onnx.NodeProto, opset: int, constants: dict, types: dict):
    op, name = node.op_type, node.name

    def refuse(problem: str) -> Finding:
        return Finding(op, name, problem)

    def input_constant(index: int) -> bool:
        return len(node.input) <= index or not node.input[index] or node.input[index] in constants

    def zero(index: int) -> bool:
        if len(node.input) <= index or not node.input[index]:
            return True
        value = _constant(constants, node.input[index])
        return value is not None and not np.any(value.astype(np.float64))

    if op == "DequantizeLinear":
        yield from (refuse(problem) for problem in _dequantize_rules(node, opset, constants, types, input_constant,
                                                                      zero))
    elif op == "QuantizeLinear" and not zero(2):
        yield refuse(f"y_zero_point must be 0: TensorRT's quantization is symmetric ({QUANTIZED_TYPES_PAGE})")
    elif op == "LSTM":
        if _attr(node, "input_forget", 0) != 0:
            yield refuse("input_forget must be 0")
        if _attr(node, "layout", 0) != 0:
            yield refuse("layout must be 0")
    elif op in ("MaxPool", "AveragePool", "LpPool"):
        if any(d != 1 for d in _attr(node, "dilations", []) or []):
            yield refuse("dilations must be empty or all ones")
        kernel = _attr(node, "kernel_shape", [])
        if op != "LpPool" and kernel and len(kernel) not in (2, 3):
            yield refuse(f"2-D or 3-D pooling only; this one is {len(kernel)}-D")
        if op == "MaxPool" and len(node.output) > 1 and node.output[1]:
            yield refuse("the Indices output is unsupported")
    elif op == "Resize":
        for attr, allowed in _RESIZE.items():
            value = _attr(node, attr)
            value = value.decode() if isinstance(value, bytes) else value
            if value is not None and value not in allowed:
                yield refuse(f"{attr} {value!r} is unsupported (TensorRT takes {', '.join(allowed)})")
        if _attr(node, "antialias", 0):
            yield refuse("antialiasing is unsupported")
    elif op == "TopK":
        if _attr(node, "sorted", 1) != 1:
            yield refuse("sorted must be 1")
        k = _constant(constants, node.input[1]) if len(node.input) > 1 else None
        if k is not None and int(np.asarray(k).ravel()[0]) >= 3840:
            yield refuse("K must be less than 3840")
    elif op == "ScatterND" and _attr(node, "reduction", b"none") not in (b"none", "none"):
        yield refuse("reduction other than 'none' is unsupported")
    elif op.startswith("Reduce") and opset >= _REDUCE_AXES_INPUT.get(op, 18) and not input_constant(1):
        yield refuse("axes must be an initializer")
    elif op == "CumSum" and not input_constant(1):
        yield refuse("axis must be a build-time constant")
    elif op == "OneHot" and not input_constant(1):
        yield refuse("depth must be a build-time constant")
    elif op == "Dropout" and len(node.input) > 2 and node.input[2]:
        training = _constant(constants, node.input[2])
        if training is None or bool(np.asarray(training).ravel()[0]):
            yield refuse("is_training must be an initializer that evaluates to False")
    elif op == "LayerNormalization" and any(o for o in node.output[1:]):
        yield refuse("only the first output (Y) is supported")
    elif op == "Constant" and any(a.name in ("sparse_value", "value_string", "value_strings")
                                  for a in node.attribute):
        yield refuse("sparse and string values are unsupported")


def _dequantize_rules(node: onnx.NodeProto, opset: int, constants: dict, types: dict, input_constant, zero):
    """What TensorRT's documentation states about a DequantizeLinear (module docstring), each
    problem in the rule's words with the page it comes from."""
    kind = _TYPE_NAMES.get(types.get(node.input[0]))
    if not input_constant(1):
        yield "the scale must be a build-time constant (an initializer)"
    else:
        scale = _constant(constants, node.input[1])
        if scale is not None and not np.all(np.asarray(scale, np.float64) > 0):
            bad = int(np.sum(~(np.asarray(scale, np.float64) > 0)))
            yield f"{bad} scale{'s' * (bad != 1)} zero, negative or NaN: scales must be positive ({SCHEMES_PAGE})"
    if not zero(2):
        yield f"x_zero_point must be zero: \"TensorRT uses a symmetric quantization scheme\" ({QUANTIZED_TYPES_PAGE})"
    if kind == "INT4" and node.input[0] not in constants:
        yield f"INT4 data that is computed: INT4 is weight-only quantization, its data an initializer " \
              f"({QUANTIZED_TYPES_PAGE})"
    block = _attr(node, "block_size", 0)
    if not block:
        if kind == "INT4":
            yield f"INT4 without blocks: TensorRT takes INT4 weights with per-block scales only (block_size 64 or " \
                  f"128; {SCHEMES_PAGE})"
        return
    if opset < BLOCK_OPSET:
        yield f"block_size at opset {opset}: blocked DequantizeLinear needs opset {BLOCK_OPSET}"
    if block not in BLOCK_SIZES:
        yield f"block_size {block}: \"the supported block sizes are 64 and 128\" ({SCHEMES_PAGE})"
    if kind is not None and kind != "INT4":
        yield f"blocks on {kind} data: block quantization is for INT4 weights only ({SCHEMES_PAGE})"
    x = constants.get(node.input[0])
    if x is not None:
        rank, axis = len(x.dims), _attr(node, "axis", 1)
        if rank != 2:
            yield f"blocks (block_size) only on 2-D tensors; this one is {rank}-D"
        if rank > 2 and axis % rank not in (rank - 1, rank - 2):
            yield f"blocks along axis {axis}: they must run along the last or second-to-last dimension ({SCHEMES_PAGE})"
