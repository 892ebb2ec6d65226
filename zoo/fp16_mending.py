"""onnxconverter-common's float16 conversion as the zoo's `fp16` variant uses it (zoo/variants.py),
and the mending its output needs before onnxruntime loads it: the converter (1.16) leaves float32
values and Casts inside a float16 graph, and casts blocked ops' empty inputs back to float32.
Each mend is a pure function of the ModelProto; `convert` applies them in order."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def opset(m: onnx.ModelProto) -> int:
    return next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)


def every_node(graph: onnx.GraphProto):
    """Every node, subgraphs' (If/Loop/Scan bodies) included."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from every_node(g)


def _casts_to_float32(m: onnx.ModelProto) -> set[str]:
    """The names of every Cast to float32 (subgraphs' too), naming the unnamed nodes first: the
    converter keeps node names, so they tell its left-over Casts from the ones it inserts (and it
    names its own after their readers: two unnamed readers gave two Casts of one name)."""
    names = set()
    for i, n in enumerate(every_node(m.graph)):
        n.name = n.name or f"zoo_fp16_{n.op_type}_{i}"
        if n.op_type == "Cast" and any(a.name == "to" and a.i == TensorProto.FLOAT for a in n.attribute):
            names.add(n.name)
    return names


def _retype_casts(m16: onnx.ModelProto, names: set[str]) -> int:
    """onnxconverter-common 1.16 retypes every float32 value float16 but leaves a Cast to float32
    (attention masks, Loop counters, quantize_dynamic's MatMulInteger outputs) at float32, which
    onnxruntime refuses: those Casts now cast to float16, as the values they write are typed."""
    retyped = 0
    for n in every_node(m16.graph):
        if n.op_type == "Cast" and n.name in names:
            for a in n.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.FLOAT16
                    retyped += 1
    return retyped


FLOAT32_ONLY = ["DynamicQuantizeLinear", "DynamicQuantizeLSTM"]  # quantize_dynamic's ops (titler, voicefilter)


def fp16_converter_args(m: onnx.ModelProto) -> dict:
    """Ops that take float32 only go on the converter's block list: it keeps them in float32 and
    casts around them. DequantizeLinear takes float16 scales from opset 19 on."""
    from onnxconverter_common import float16

    extra = FLOAT32_ONLY + (["DequantizeLinear", "QuantizeLinear"] if opset(m) < 19 else [])
    # ai.onnx.ml's Scaler, ZipMap, ArrayFeatureExtractor... take no float16 (surfaces', skl2onnx's MLPs)
    extra += sorted({n.op_type for n in every_node(m.graph) if n.domain == "ai.onnx.ml"})
    return {"op_block_list": list(float16.DEFAULT_OP_BLOCK_LIST) + extra}


def _mend_io(m16: onnx.ModelProto, blocked: set[str]) -> int:
    """onnxconverter-common 1.16 leaves two float32 values inside a float16 graph (keep_io_types):
    a graph input read by some of its readers uncast (vit_focus's Conv, fsmn_vad's caches), and a
    graph output that other nodes also read, which then read the output's float32 Cast (MiniLM, the
    romanizer). A reader that is not on the block list now reads a float16 copy."""
    g = m16.graph
    inputs = {i.name for i in g.input if i.type.tensor_type.elem_type == TensorProto.FLOAT}
    back = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Cast" and n.output[0] in
            {o.name for o in g.output} and any(a.name == "to" and a.i == TensorProto.FLOAT for a in n.attribute)}
    casts, mended = [], 0
    for n in g.node:
        if n.op_type in blocked or n.op_type == "Cast":
            continue
        for k, x in enumerate(n.input):
            if x in back:
                n.input[k] = back[x]
            elif x in inputs:
                n.input[k] = f"{x}__zoo_fp16"
                if not any(c.output[0] == n.input[k] for c in casts):
                    casts.append(helper.make_node("Cast", [x], [n.input[k]], name=f"{x}__zoo_fp16",
                                                  to=TensorProto.FLOAT16))
            else:
                continue
            mended += 1
    nodes = casts + list(g.node)  # each reads a graph input: first keeps the order topological
    del g.node[:]
    g.node.extend(nodes)
    return mended


def _empty_casts(m16: onnx.ModelProto) -> int:
    """A Cast of an empty Constant becomes that empty Constant of the Cast's type: the converter
    casts a blocked Resize's empty `scales` back to float32, and onnxruntime's shape inference
    then takes it for given scales beside the sizes and refuses the node (SLANet+)."""
    empty = {n.output[0] for n in m16.graph.node if n.op_type == "Constant"
             and any(a.name == "value" and 0 in a.t.dims for a in n.attribute)}
    made = 0
    for n in m16.graph.node:
        if n.op_type == "Cast" and n.input[0] in empty:
            to = next(a.i for a in n.attribute if a.name == "to")
            n.op_type = "Constant"
            del n.input[:]
            del n.attribute[:]
            n.attribute.append(helper.make_attribute("value", helper.make_tensor(n.output[0], to, [0], [])))
            made += 1
    return made


def convert(m: onnx.ModelProto) -> onnx.ModelProto:
    """`m` in float16, I/O kept float32, mended; raises what the converter raises."""
    from onnxconverter_common import float16

    casts = _casts_to_float32(m)
    args = fp16_converter_args(m)
    m16 = float16.convert_float_to_float16(m, keep_io_types=True, disable_shape_infer=False, **args)
    _retype_casts(m16, casts)
    _mend_io(m16, set(args["op_block_list"]))
    _empty_casts(m16)
    return m16
