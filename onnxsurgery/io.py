"""Loading and saving models, and exporting gs graphs to ONNX.

- `load_model` reads a path (with external data from beside it) or takes a ModelProto.
- `export_model` turns a gs graph back into a ModelProto. It replaces `gs.export_onnx` for two
  reasons: gs writes an outer-scope constant again as an initializer of every subgraph that
  reads it (the output grows), and gs with onnx 1.23 stamps IR version 14, which onnxruntime
  1.31 refuses. Here each constant is written once, in the innermost graph that encloses all
  its uses, and the input's IR version, opsets, metadata and functions are kept.
- `save_model` writes atomically (temporary file, then rename), switching to external data
  when asked or when the protobuf would pass the 2 GB limit.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
from google.protobuf.message import DecodeError
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

from .errors import InputError, OutputError
from .graph_utils import collect_constants, is_sparse, iter_scopes

PROTOBUF_LIMIT = 2**31 - 1
# Leave room for the rest of the message when deciding whether tensors must go external.
EXTERNAL_DATA_MARGIN = 64 * 2**20
EXTERNAL_DATA_THRESHOLD = 1024  # tensors smaller than this stay inside the .onnx
EXTERNAL_DATA_ALIGN = 4096  # page-aligned offsets, so the runtime can memory-map tensors


def load_model(source: str | os.PathLike | onnx.ModelProto) -> onnx.ModelProto:
    """Read a model, with its external data. A ModelProto is returned as it is."""
    if isinstance(source, onnx.ModelProto):
        return source
    return load_model_with_size(source)[0]


def load_model_with_size(source: str | os.PathLike) -> tuple[onnx.ModelProto, int]:
    """Read a model and its external data; also return the bytes on disk (.onnx + data files).

    Sizes come from the file system: `ModelProto.ByteSize()` serialises the whole model
    under upb, which costs a copy of it.
    """
    path = Path(source)
    if not path.exists():
        raise InputError(f"input not found: {path}")
    if path.is_dir():
        raise InputError(f"input is a directory, not an .onnx file: {path}")
    try:
        model = onnx.load(str(path), load_external_data=False)
        data_files = {
            entry.value
            for t in all_tensor_protos(model.graph)
            if t.data_location == onnx.TensorProto.EXTERNAL
            for entry in t.external_data
            if entry.key == "location"
        }
        disk_bytes = path.stat().st_size + sum(
            (path.parent / f).stat().st_size for f in data_files if (path.parent / f).is_file()
        )
        if data_files:
            onnx.load_external_data_for_model(model, str(path.parent))
    except DecodeError as e:
        raise InputError(f"not an ONNX model (protobuf parse failed): {path}") from e
    except FileNotFoundError as e:
        raise InputError(f"external data file missing for {path}: {e.filename or e}") from e
    except (OSError, ValueError, onnx.checker.ValidationError) as e:
        raise InputError(f"cannot read {path}: {e}") from e
    if not model.HasField("graph") or not (model.graph.node or model.graph.output):
        raise InputError(f"not an ONNX model (no graph): {path}")
    return model, disk_bytes


def import_graph(model: onnx.ModelProto) -> gs.Graph:
    try:
        return gs.import_onnx(model)
    except Exception as e:  # gs raises plain exceptions on malformed graphs
        raise InputError(f"cannot import the graph: {e}") from e


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

    def __init__(self, graph: gs.Graph):
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
        target.input.extend(OnnxExporter.export_value_info_proto(t, do_type_check) for t in g.inputs)
        target.output.extend(
            OnnxExporter.export_value_info_proto(t, do_type_check) for t in g.outputs
        )
        for t in self.initializers.get(id(g), []):
            if is_sparse(t):
                target.sparse_initializer.append(OnnxExporter.export_sparse_tensor_proto(t))
            else:
                target.initializer.append(OnnxExporter.export_tensor_proto(t))
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
                target.value_info.append(OnnxExporter.export_value_info_proto(t, False))

    def fill_node(self, target: onnx.NodeProto, node: gs.Node) -> None:
        target.op_type = node.op
        if node.name:
            target.name = node.name
        if node.domain:
            target.domain = node.domain
        target.input.extend(t.name for t in node.inputs)
        target.output.extend(t.name for t in node.outputs)
        for key, value in node.attrs.items():
            if isinstance(value, gs.Graph):
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
    min_opset: int | None = None,
) -> onnx.ModelProto:
    """Export `graph` as a ModelProto, taking IR version, opsets, metadata and functions from
    `template` (the model it was imported from) when given.

    `keep_as_inputs` names main-graph constants that must also be listed as graph inputs
    (overridable initializers). `min_opset` raises the default-domain opset when a rewrite needs
    a newer operator version.
    """
    model = onnx.ModelProto()
    _ScopedExporter(graph).fill_graph(model.graph, graph, do_type_check=True)

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
    if min_opset is not None:
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx") and o.version < min_opset:
                o.version = min_opset

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


def check_output_path(input_path: str | os.PathLike | None, output: str | os.PathLike,
                      in_place: bool) -> Path:
    out = Path(output)
    if input_path is not None and not in_place:
        try:
            same = out.resolve() == Path(input_path).resolve()
        except OSError:
            same = False
        if same:
            raise OutputError(f"output is the input file ({out}); pass --in-place to overwrite it")
    if out.is_dir():
        raise OutputError(f"output is a directory: {out}")
    if not out.parent.exists():
        raise OutputError(f"output folder does not exist: {out.parent}")
    return out


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


def save_model(model: onnx.ModelProto, path: str | os.PathLike, *,
               external_data: bool = False) -> list[Path]:
    """Write `model` atomically; returns the files written.

    With `external_data` (or automatically above the 2 GB protobuf limit) tensors of at least
    1 KB go to one `<name>.data` file beside the model, page-aligned. This moves the tensor
    bytes out of `model` as it goes, so the caller's ModelProto is changed.
    """
    path = Path(path)
    external = external_data or needs_external_data(model)
    tmp_files: list[Path] = []
    try:
        finals: list[tuple[Path, Path]] = []
        if external:
            data_path = path.with_name(path.name + ".data")
            tmp_data = _temp_beside(data_path)
            tmp_files.append(tmp_data)
            _move_tensors_to_file(model, tmp_data, data_path.name)
            finals.append((tmp_data, data_path))
        tmp_model = _temp_beside(path)
        tmp_files.append(tmp_model)
        try:
            payload = model.SerializeToString()
        except ValueError as e:  # protobuf refuses messages over 2 GB
            raise OutputError(f"model too large to serialise even with external data: {e}") from e
        with open(tmp_model, "wb") as f:
            f.write(payload)
        del payload
        finals.append((tmp_model, path))
        for tmp, final in finals:
            os.replace(tmp, final)
        return [final for _, final in finals]
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        for tmp in tmp_files:
            if tmp.exists():
                tmp.unlink()


def _temp_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def _graphs_everywhere(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs_everywhere(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs_everywhere(g)


def _initializers_everywhere(graph: onnx.GraphProto):
    for g in _graphs_everywhere(graph):
        yield from g.initializer


def all_tensor_protos(graph: onnx.GraphProto):
    """Initializers and tensor attributes (Constant nodes), in every scope."""
    for g in _graphs_everywhere(graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors


def _move_tensors_to_file(model: onnx.ModelProto, data_file: Path, location: str) -> None:
    """Move large initializer payloads (all scopes) into `data_file`, page-aligned."""
    from onnx import numpy_helper

    with open(data_file, "wb") as f:
        for t in _initializers_everywhere(model.graph):
            if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type == onnx.TensorProto.STRING:
                continue
            if not t.HasField("raw_data"):
                arr = numpy_helper.to_array(t)
                if arr.nbytes < EXTERNAL_DATA_THRESHOLD:
                    continue
                raw = numpy_helper.from_array(arr).raw_data
                for field in ("float_data", "int32_data", "int64_data", "double_data",
                              "uint64_data"):
                    t.ClearField(field)
            else:
                raw = t.raw_data
            if len(raw) < EXTERNAL_DATA_THRESHOLD:
                continue
            offset = f.tell() + (-f.tell() % EXTERNAL_DATA_ALIGN)  # round up to the alignment
            f.seek(offset)
            f.write(raw)
            del t.external_data[:]
            for key, value in (("location", location), ("offset", str(offset)),
                               ("length", str(len(raw)))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            t.data_location = onnx.TensorProto.EXTERNAL
            t.ClearField("raw_data")
