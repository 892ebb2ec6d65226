"""Constants that onnx's version converter adds, typed as the inputs they go with.

Before: an upgraded model where the converter turned an attribute into a float32 Constant input
(Clip 10 -> 11: `min` and `max` become inputs 1 and 2), whatever type the node computes in.
After: each such Constant holds the node's own type where the op's schema binds that input to
the same type parameter as input 0. A float16 model at opset 9 (Guten OCR's PP-OCRv4 rec from
npm, converted by onnxconverter-common) has its Clips compute in float16; upgraded for
DequantizeLinear (13, 19, 21), onnxruntime refused it ("Type parameter (T) of Optype (Clip) bound
to different types (tensor(float16) and tensor(float))"), so `quant --dtype int4`, `--target
tensorrt` and `--lowering dq` refused a model that runs.

Limits: only Constant nodes whose output the original model does not have (the converter's),
only where the original's types are known by onnx's shape inference; a float32 model is left as
the converter wrote it (nothing to retype, nothing inferred)."""

from __future__ import annotations

import logging

import onnx
from onnx import TensorProto, helper, numpy_helper

from .storage.protos import graphs_everywhere

log = logging.getLogger(__name__)

FLOATS = (TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
# inference needs shapes, not weights: larger raw tensors are dropped from the probe
PROBE_BYTES = 1024


def _has_other_floats(model: onnx.ModelProto) -> bool:
    """Whether any tensor the graphs hold or declare is a float type other than float32."""
    for g in graphs_everywhere(model.graph):
        if any(t.data_type in FLOATS for t in g.initializer):
            return True
        if any(v.type.tensor_type.elem_type in FLOATS for v in (*g.input, *g.output, *g.value_info)):
            return True
        if any(n.op_type == "Constant" and any(a.name == "value" and a.t.data_type in FLOATS for a in n.attribute)
               for n in g.node):
            return True
    return False


def _element_types(model: onnx.ModelProto) -> dict[str, int] | None:
    """Tensor name -> element type in `model` (inferred), or None where inference fails."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for g in graphs_everywhere(probe.graph):
        for init in g.initializer:
            if len(init.raw_data) > PROBE_BYTES:
                init.raw_data = b""  # shape and type stay; the values are not read
    try:
        typed = onnx.shape_inference.infer_shapes(probe)
    except Exception:  # noqa: BLE001 - a courtesy: the upgraded model is verified anyway
        return None
    types: dict[str, int] = {}
    for g in graphs_everywhere(typed.graph):
        for v in (*g.input, *g.output, *g.value_info):
            if v.type.tensor_type.elem_type:
                types[v.name] = v.type.tensor_type.elem_type
        for t in g.initializer:
            types[t.name] = t.data_type
        for n in g.node:
            for a in n.attribute:
                if n.op_type == "Constant" and a.name == "value":
                    types[n.output[0]] = a.t.data_type
    return types


def retype_added_constants(model: onnx.ModelProto, upgraded: onnx.ModelProto, target: int) -> int:
    """Retype, in `upgraded`, the float32 Constants the converter added where the reading node's
    input 0 (same type parameter) is of another float type in `model`. Returns how many."""
    if not _has_other_floats(model):
        return 0
    types = _element_types(model)
    if types is None:
        return 0
    changed = 0
    for g in graphs_everywhere(upgraded.graph):
        added = {n.output[0]: n for n in g.node
                 if n.op_type == "Constant" and n.output and n.output[0] not in types}
        for node in g.node:
            want = types.get(node.input[0]) if node.input else None
            if want not in FLOATS or node.domain not in ("", "ai.onnx"):
                continue
            try:
                formal = onnx.defs.get_schema(node.op_type, target, "").inputs
            except onnx.defs.SchemaError:
                continue
            for i, name in enumerate(node.input[1:], 1):
                const = added.get(name)
                if const is None or i >= len(formal) or formal[i].type_str != formal[0].type_str:
                    continue
                value = next((a for a in const.attribute if a.name == "value"), None)
                if value is None or value.t.data_type != TensorProto.FLOAT:
                    continue
                values = numpy_helper.to_array(value.t)
                value.t.CopyFrom(helper.make_tensor(value.t.name, want, list(values.shape),
                                                    values.astype(float).ravel().tolist()))
                changed += 1
    if changed:
        log.info("typed %d constant(s) the opset converter added as their readers' inputs", changed)
    return changed
