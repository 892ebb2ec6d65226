"""Loading models, and sizing what saving them takes.

- `load_model` reads a path (with external data from beside it) or takes a ModelProto;
  `open_model` parses one leaving the payloads in their files (lazy.py); `import_onnx` is
  gs's import of it (the graph_api's `import_graph` prepares that graph for scripts).
- `export.py` turns a gs graph back into a ModelProto (`export_model`).
- `save_model` writes atomically (temporary file, then rename), switching to external data
  when asked or when the protobuf would pass the 2 GB limit; `stage_model` is its first half,
  for callers that check the written file before it replaces anything. Both live in
  `staging.py`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ..errors import InputError
from .lazy import ExternalFiles, complete_external_lengths, materialize, read_model_skipping_weights
from .long_lists import put_back, set_aside
from .paths import check_external_locations, external_ref
from .protos import all_tensor_protos, graphs_everywhere
from .skim import read_structure
from .staging import PROTOBUF_LIMIT

if TYPE_CHECKING:  # gs and graph_utils (which loads it) are imported where a graph is made: shrink's
    # direct path opens its model here and makes none (api/shrink_direct.py)
    import onnx_graphsurgeon as gs

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


def open_model(source: str | os.PathLike, *, structure: bool = False) -> tuple[onnx.ModelProto, ExternalFiles, int]:
    """Parse a model but leave tensor payloads in their files (see `lazy`). `structure`: its long
    list attributes left out too (skim.read_structure), for a command that writes nothing.

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
        before = _file_key(path, structure)
        model = read_structure(path) if structure else read_model_skipping_weights(path)
    except (DecodeError, ValueError) as e:
        raise InputError(f"not an ONNX model (protobuf parse failed): {path}") from e
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    if not model.HasField("graph") or not (model.graph.node or model.graph.output):
        raise InputError(f"not an ONNX model (no graph): {path}")
    tensors = list(all_tensor_protos(model.graph))
    if before not in _PROTO_CHECKED:
        _check_names_are_text(model, path)
        _check_graph_io_typed(model.graph, path)
        _check_initializer_names_unique(model.graph, path)
        _check_sparse_indices(model.graph, path)
        _check_tensor_sizes(tensors, path)
        if before is not None and _file_key(path, structure) == before:  # unchanged while read: these bytes passed
            _PROTO_CHECKED.add(before)
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
    unstated = [t for t in external if not any(e.key == "length" and e.value for e in t.external_data)]
    try:
        complete_external_lengths(external, path.parent)
    except (KeyError, ValueError) as e:
        raise InputError(f"malformed external data reference in {path}: {e}") from e
    _fit_unstated_lengths(unstated, path)
    _check_external_extents(external, path)
    return model, ExternalFiles(path.parent, data_files, model_file=path.name), disk_bytes


# The files whose protos passed open_model's checks of the proto alone (text names, typed graph
# inputs, unique initializer names, sparse indices, payload sizes), by path, inode, size and time:
# `quant --inputs` opens its input six times (the plans, the candidates' builds, the run; isbnx_det
# 0.04 s of CPU an open, inputs17), `quant --dtype int4` twice (the workspace, then the opset
# upgrade; terrain_diffusion 0.05 s, int4conv18). The checks that look at other files (external
# locations, data files' extents) run every time.
_PROTO_CHECKED: set[tuple] = set()


def _file_key(path: Path, structure: bool) -> tuple | None:
    """The file's identity and how it is read; None where it cannot be taken (its checks then run
    every time)."""
    try:
        stat = path.stat()
        return str(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, structure
    except OSError:
        return None


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


def _fit_unstated_lengths(tensors: list[onnx.TensorProto], path: Path) -> None:
    """A reference with no `length` reads what its dims need from its offset, as onnxruntime
    does: the rest of the file (what `complete_external_lengths` gave it) is cut to that, and a
    rest shorter than that is refused here, from the sizes alone: dims claiming 10^12 elements
    over a 16 KB file once reached numpy's reshape as an internal error."""
    for t in tensors:
        want = _payload_bytes(t.data_type, math.prod(t.dims))
        entry = next(e for e in t.external_data if e.key == "length")
        if want is None or not entry.value.isdigit():
            continue  # a negative rest (offset past the end): _check_external_extents says so
        if int(entry.value) < want:
            raise InputError(f"not a valid ONNX model: tensor '{t.name}' has {entry.value} bytes in its data file, "
                             f"its dims {list(t.dims)} need {want}: {path}")
        entry.value = str(want)


def _payload_bytes(data_type: int, count: int) -> int | None:
    """payload_sizes.payload_nbytes, or None for a type it cannot size."""
    from ..payload_sizes import payload_nbytes

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


def _check_initializer_names_unique(graph: onnx.GraphProto, path: Path) -> None:
    """No two initializers of one graph share a name (ONNX names are single-assignment). Which
    one a reader gets is each tool's own choice: onnxruntime ran the file with one, quant's
    verification with the other (relative L2 1.48, written with exit 0)."""
    for g in graphs_everywhere(graph):
        seen: set[str] = set()
        for t in g.initializer:
            if t.name in seen:
                raise InputError(f"not a valid ONNX model: two initializers are named '{t.name}': {path}")
            seen.add(t.name)


def _check_sparse_indices(graph: onnx.GraphProto, path: Path) -> None:
    """Each sparse initializer's indices lie inside its dense shape, one per value (onnxruntime
    refuses others; gs densified an index past the end into a model that ran: `quant
    --no-verify` wrote a model the input was not). Indices held in a data file are left to the
    readers."""
    for g in graphs_everywhere(graph):
        for sparse in g.sparse_initializer:
            dense = math.prod(sparse.dims)
            count = math.prod(sparse.values.dims)
            indices = sparse.indices
            name = sparse.values.name or indices.name
            if indices.data_location == onnx.TensorProto.EXTERNAL:
                continue
            try:
                where = onnx.numpy_helper.to_array(indices).astype(np.int64, copy=False)
            except (ValueError, TypeError) as e:
                raise InputError(f"not a valid ONNX model: sparse tensor '{name}' has unreadable indices: "
                                 f"{path}") from e
            if where.ndim == 2 and where.shape == (count, len(sparse.dims)):  # one row of coordinates per value
                bounds = np.asarray(sparse.dims, np.int64)
                bad = where.size and bool(((where < 0) | (where >= bounds)).any())
            elif where.ndim == 1 and where.shape[0] == count:  # positions in the flattened tensor
                bad = where.size and bool(((where < 0) | (where >= dense)).any())
            else:
                raise InputError(f"not a valid ONNX model: sparse tensor '{name}' has {count} values and indices "
                                 f"of shape {list(where.shape)}: {path}")
            if bad:
                raise InputError(f"not a valid ONNX model: sparse tensor '{name}' has an index outside its shape "
                                 f"{list(sparse.dims)}: {path}")


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


def import_onnx(model: onnx.ModelProto, *, long_lists_raw: bool = False) -> gs.Graph:
    """gs.import_onnx, its failures as InputError and the attributes it skips carried through
    (RawAttribute). The graph as gs imports it: for scripts, onnxsurgery.import_graph also makes
    names unique and keeps overridable initializers among the inputs. `long_lists_raw`: list
    attributes of 64K elements or more (tree ensembles' tables) stay AttributeProtos, as
    RawAttribute, and leave `model`'s nodes (long_lists.py: only for a model the caller parsed)."""
    import onnx_graphsurgeon as gs

    aside = set_aside(model.graph) if long_lists_raw else None
    try:
        graph = gs.import_onnx(model)
    except Exception as e:  # gs raises plain exceptions on malformed graphs
        raise InputError(f"cannot import the graph: {e}") from e
    if aside is not None:
        put_back(aside, graph, RawAttribute)
    _keep_skipped_attributes(model.graph, graph)
    _declared_types_win(model.graph, graph)
    return graph


def _declared_types_win(source: onnx.GraphProto, graph: gs.Graph) -> None:
    """A graph input's or output's declared element type over a value_info entry of the same name
    (which the spec leaves to other values): gs takes the value_info's, and an export then
    declares it. onnxconverter_common's float16 with keep_io_types left `fetch_name_0: float16`
    in PP-OCRv6 rec's value_info beside its float output: the result declared a float16 output
    that its final Cast to float contradicts, and onnxruntime refused to load it."""
    for protos, tensors in ((source.input, graph.inputs), (source.output, graph.outputs)):
        for proto, tensor in zip(protos, tensors):
            elem = proto.type.tensor_type.elem_type if proto.type.HasField("tensor_type") else 0
            if elem not in _NUMPY_TYPES or proto.name != tensor.name:
                continue  # bfloat16, float8 and the like: as gs has them
            try:
                current = np.dtype(tensor.dtype)
            except TypeError:  # gs keeps such types as onnx's own numbers
                current = None
            declared = onnx.helper.tensor_dtype_to_np_dtype(elem)
            if tensor.dtype is not None and current != declared:
                tensor.dtype = declared


_NUMPY_TYPES = {getattr(onnx.TensorProto, t) for t in ("FLOAT", "FLOAT16", "DOUBLE", "INT8", "INT16", "INT32",
                                                       "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "BOOL")}


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
    import onnx_graphsurgeon as gs

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
