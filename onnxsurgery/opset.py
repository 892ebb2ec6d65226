"""Opset upgrade with onnx's version converter, for lowerings that need a newer opset than the
model has (DequantizeLinear with blocks or 4-bit types: 21). The caller verifies the upgraded
model against the original in onnxruntime before building on it."""

from __future__ import annotations

import logging

import onnx
from onnx import helper, version_converter

from .errors import UnsupportedModelError

log = logging.getLogger(__name__)


def model_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def upgrade_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """`model` converted to ai.onnx opset `target`, with the IR version that opset needs.
    Raises UnsupportedModelError naming every op type the converter cannot carry."""
    source = model_opset(model)
    try:
        upgraded = version_converter.convert_version(model, target)
    except Exception as e:  # the converter raises plain RuntimeErrors / ValueErrors
        blocked = _ops_blocking(model, target)
        detail = f"ops it cannot carry: {', '.join(blocked)}" if blocked else str(e).splitlines()[0]
        raise UnsupportedModelError(f"cannot upgrade the model from opset {source} to {target} "
                                    f"(onnx {onnx.__version__} version converter; {detail})") from e
    needed_ir = helper.find_min_ir_version_for([helper.make_opsetid("", target)])
    upgraded.ir_version = max(model.ir_version, needed_ir)
    log.info("upgraded opset %d -> %d", source, target)
    return upgraded


def _ops_blocking(model: onnx.ModelProto, target: int) -> list[str]:
    """The op types whose nodes fail to convert on their own (each tried in a one-node model
    with untyped inputs, attributes kept)."""
    source = model_opset(model)
    seen, blocked = set(), []
    for node in _all_nodes(model.graph):
        if node.domain not in ("", "ai.onnx") or node.op_type in seen:
            continue
        seen.add(node.op_type)
        single = onnx.NodeProto()
        single.CopyFrom(node)
        single.ClearField("attribute")
        single.attribute.extend(a for a in node.attribute if a.type != onnx.AttributeProto.GRAPH)
        names = [x for x in single.input if x]
        graph = helper.make_graph([single], "probe", [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)
                                                      for x in dict.fromkeys(names)],
                                  [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, None)
                                   for y in single.output if y])
        probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", source)])
        try:
            version_converter.convert_version(probe, target)
        except Exception:
            blocked.append(node.op_type)
    return blocked


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            for g in attr.graphs:
                yield from _all_nodes(g)
