"""Loading and saving models, and exporting gs graphs to ONNX.

- `load_model` reads a path (with external data from beside it) or takes a ModelProto;
  `open_model` parses one leaving the payloads in their files (lazy.py); `import_onnx` is
  gs's import of it (the graph_api's `import_graph` prepares that graph for scripts).
- `export_model` turns a gs graph back into a ModelProto. It replaces `gs.export_onnx` for two
  reasons: gs writes an outer-scope constant again as an initializer of every subgraph that
  reads it (the output grows), and gs with onnx 1.23 stamps IR version 14, which onnxruntime
  1.31 refuses. Here each constant is written once, in the innermost graph that encloses all
  its uses, and the input's IR version, opsets, metadata and functions are kept.
- `save_model` writes atomically (temporary file, then rename), switching to external data
  when asked or when the protobuf would pass the 2 GB limit; `stage_model` is its first half,
  for callers that check the written file before it replaces anything. Both live in
  `staging.py`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
from google.protobuf.message import DecodeError
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter, dtype_to_onnx

from .errors import InputError
from .graph_utils import collect_constants, is_sparse, iter_scopes, payload_nbytes
from .lazy import (ExternalFiles, complete_external_lengths, external_ref, held_payload, materialize,
                   read_model_skipping_weights)
from .paths import check_external_locations
from .protos import all_tensor_protos, graphs_everywhere
from .staging import PROTOBUF_LIMIT

# Leave room for the rest of the message when deciding whether tensors must go external.
EXTERNAL_DATA_MARGIN = 64 * 2**20


def load_model(source: str | os.PathLike | onnx.ModelProto) -> onnx.ModelProto:
    """Read a whole model, external data included. A ModelProto is returned as it is."""
    if isinstance(source, onnx.ModelProto):
        return source
    model, files, _ = open_model(source)
    materialize(model, files, all_tensor_protos(model.graph))
    files.close()
    return model


def open_model(source: str | os.PathLike) -> tuple[onnx.ModelProto, ExternalFiles, int]:
    """Parse a model but leave tensor payloads in their files (see `lazy`).

    Returns the model, the handle to read payloads through, and the bytes on disk (.onnx and
    data files). Sizes come from the file system: under upb, `ByteSize()` serialises the whole
    model, which costs a copy of it.
    """
    path = Path(source)
    if not path.exists():
        raise InputError(f"input not found: {path}")
    if path.is_dir():
        raise InputError(f"input is a directory, not an .onnx file: {path}")
    try:
        model = read_model_skipping_weights(path)
    except (DecodeError, ValueError) as e:
        raise InputError(f"not an ONNX model (protobuf parse failed): {path}") from e
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    if not model.HasField("graph") or not (model.graph.node or model.graph.output):
        raise InputError(f"not an ONNX model (no graph): {path}")
    _check_names_are_text(model, path)
    _check_graph_io_typed(model.graph, path)
    tensors = list(all_tensor_protos(model.graph))
    _check_tensor_sizes(tensors, path)
    external = [t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    data_files = frozenset(e.value for t in external for e in t.external_data if e.key == "location")
    data_files -= {path.name}  # the references the lazy reader made into the .onnx itself
    # before any data file is looked at: the locations come from the file (issue 38)
    check_external_locations(model, path.parent, path.name)
    disk_bytes = path.stat().st_size
    for name in sorted(data_files):
        data = path.parent / name
        if not data.is_file():
            raise InputError(f"external data file missing for {path}: {data}")
        disk_bytes += data.stat().st_size
    try:
        complete_external_lengths(external, path.parent)
    except (KeyError, ValueError) as e:
        raise InputError(f"malformed external data reference in {path}: {e}") from e
    _check_external_extents(external, path)
    return model, ExternalFiles(path.parent, data_files, model_file=path.name), disk_bytes


_TYPED_FIELDS = {  # data type -> the repeated field holding one value per element
    onnx.TensorProto.FLOAT: "float_data", onnx.TensorProto.DOUBLE: "double_data",
    onnx.TensorProto.INT64: "int64_data", **{t: "int32_data" for t in (
        onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8, onnx.TensorProto.UINT16,
        onnx.TensorProto.UINT8, onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)},
}


def _check_tensor_sizes(tensors: list[onnx.TensorProto], path: Path) -> None:
    """Each tensor's payload holds as many values as its dims say (a damaged file's dims or
    payload would otherwise fail deep inside numpy). Strings and unusual layouts are left to
    the readers. An external payload's stated length must match too (large raw payloads are read
    as external references into the .onnx itself, `lazy`); whether it lies inside its file is
    `_check_external_extents`'s job."""
    for t in tensors:
        if any(d < 0 for d in t.dims):
            raise InputError(f"not a valid ONNX model: tensor '{t.name}' has a negative dimension: {path}")
        if t.data_type == onnx.TensorProto.STRING:
            continue
        count = math.prod(t.dims)
        if t.data_location == onnx.TensorProto.EXTERNAL:
            stated = next((e.value for e in t.external_data if e.key == "length" and e.value), None)
            want = _payload_bytes(t.data_type, count)
            if stated is not None and want is not None and stated.isdigit() and int(stated) != want:
                raise InputError(f"not a valid ONNX model: tensor '{t.name}' stores {stated} bytes, its dims "
                                 f"{list(t.dims)} need {want}: {path}")
            continue
        if t.HasField("raw_data"):
            got, want = len(t.raw_data), _payload_bytes(t.data_type, count)
            if want is not None and got != want:
                raise InputError(f"not a valid ONNX model: tensor '{t.name}' holds {got} bytes, its dims "
                                 f"{list(t.dims)} need {want}: {path}")
            continue
        field = _TYPED_FIELDS.get(t.data_type)
        if field is not None and len(getattr(t, field)) != count:
            raise InputError(f"not a valid ONNX model: tensor '{t.name}' holds {len(getattr(t, field))} values, "
                             f"its dims {list(t.dims)} need {count}: {path}")


def _payload_bytes(data_type: int, count: int) -> int | None:
    """graph_utils.payload_nbytes, or None for a type it cannot size."""
    try:
        return payload_nbytes(data_type, count)
    except (KeyError, ValueError, TypeError):
        return None


def _check_graph_io_typed(graph: onnx.GraphProto, path: Path) -> None:
    """The main graph's inputs and outputs carry a type (gs cannot write them back otherwise)."""
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for t in values:
            which = t.type.WhichOneof("value")
            if which is None or (which == "tensor_type" and not t.type.tensor_type.elem_type):
                raise InputError(f"not a valid ONNX model: graph {kind} '{t.name}' has no type: {path}")


def _check_names_are_text(model: onnx.ModelProto, path: Path) -> None:
    """ONNX's string fields (names, op types, doc strings, metadata) are UTF-8. protobuf (upb)
    hands one that is not valid UTF-8 back as bytes, on which gs, onnx and onnxruntime fail in
    their own ways: a damaged file. Walks every message (tensor payloads are bytes or numbers,
    not strings, so they cost nothing here)."""
    pending = [model]
    while pending:
        message = pending.pop()
        for field, value in message.ListFields():
            # protobuf 7 dropped FieldDescriptor.label for is_repeated
            repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
            if field.type == field.TYPE_STRING:
                for text in (value if repeated else (value,)):
                    if not isinstance(text, str):
                        raise InputError(f"not a valid ONNX model: {field.name} {text[:40]!r} is not UTF-8 text: "
                                         f"{path}")
            elif field.type == field.TYPE_MESSAGE:
                pending.extend(value if repeated else (value,))


def _check_external_extents(external: list[onnx.TensorProto], path: Path) -> None:
    """Every external tensor's bytes lie inside its file: a short or truncated data file is bad
    input, found from the file sizes alone before any payload is read."""
    sizes: dict[str, int] = {}
    for t in external:
        try:
            location, offset, length = external_ref(t)
        except (KeyError, ValueError) as e:
            raise InputError(f"malformed external data reference for tensor '{t.name}' in {path}: {e}") from e
        if location not in sizes:
            sizes[location] = (path.parent / location).stat().st_size
        if offset < 0 or length < 0 or offset + length > sizes[location]:
            raise InputError(f"external data file {location} is shorter than {path.name} says: tensor '{t.name}' "
                             f"needs bytes {offset}..{offset + length}, the file has {sizes[location]}")


def import_onnx(model: onnx.ModelProto) -> gs.Graph:
    """gs.import_onnx, its failures as InputError and the attributes it skips carried through
    (RawAttribute). The graph as gs imports it: for scripts, onnxsurgery.import_graph also makes
    names unique and keeps overridable initializers among the inputs."""
    try:
        graph = gs.import_onnx(model)
    except Exception as e:  # gs raises plain exceptions on malformed graphs
        raise InputError(f"cannot import the graph: {e}") from e
    _keep_skipped_attributes(model.graph, graph)
    return graph


class RawAttribute:
    """An attribute gs does not import (TYPE_PROTO: Optional's `type`), carried through as the
    input model's own AttributeProto and written back as it was."""

    def __init__(self, proto: onnx.AttributeProto):
        self.proto = proto

    def __repr__(self) -> str:
        return f"RawAttribute({self.proto.name})"


_SKIPPED_BY_GS = (onnx.AttributeProto.TYPE_PROTO, onnx.AttributeProto.TYPE_PROTOS)


def _keep_skipped_attributes(source: onnx.GraphProto, graph: gs.Graph) -> None:
    """gs imports the nodes of each graph in order, so the two node lists pair up."""
    if len(source.node) != len(graph.nodes):
        return
    for proto, node in zip(source.node, graph.nodes):
        for attr in proto.attribute:
            if attr.type in _SKIPPED_BY_GS and attr.name not in node.attrs:
                node.attrs[attr.name] = RawAttribute(attr)
            elif attr.type == onnx.AttributeProto.GRAPH and isinstance(node.attrs.get(attr.name), gs.Graph):
                _keep_skipped_attributes(attr.g, node.attrs[attr.name])


def inputs_with_defaults(model: onnx.ModelProto) -> frozenset[str]:
    """Main-graph initializers that are also listed as graph inputs.

    From IR 4 on these are defaults a caller may override, so passes must leave them alone;
    before IR 4 every initializer had to be listed as an input.
    """
    if model.ir_version < 4:
        return frozenset()
    init = {t.name for t in model.graph.initializer}
    return frozenset(i.name for i in model.graph.input if i.name in init)


# ---------------------------------------------------------------------------------------------
# Export


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
        if t.dtype is None or getattr(t, "type", "tensor_type") in self._GS_TYPES:
            return OnnxExporter.export_value_info_proto(t, do_type_check)
        original = self.original_types.get(t.name)
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
                target.attribute.extend(OnnxExporter.export_attributes({key: value}))


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


# ---------------------------------------------------------------------------------------------
# Saving


def tensor_payload_bytes(model: onnx.ModelProto) -> int:
    """Bytes of all tensor payloads held inside the message, from dims and dtype (no copy)."""
    total = 0
    for t in all_tensor_protos(model.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type == onnx.TensorProto.STRING:
            total += sum(len(s) for s in t.string_data)
        elif t.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
            total += (n + 1) // 2
        else:
            total += n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return total


def needs_external_data(model: onnx.ModelProto) -> bool:
    return tensor_payload_bytes(model) > PROTOBUF_LIMIT - EXTERNAL_DATA_MARGIN
