"""Long list attributes written from the input's parsed protos, not from a second copy of them.

An export copies every attribute into the new ModelProto: for a tree ensemble (luscinia's 194 MB
of tables in 14 list attributes, which protobuf parses into 1.2 GB) the input's parsed copy and
the output's were alive at once, then the output's serialized bytes too (`npy`: 2.9 GB). Here
each long list attribute (a RawAttribute, long_lists.py) is exported as a placeholder: its name,
a token in its doc_string and its type, a few bytes. The writer (writer.layout_model's `plain`
rewrite) puts the input's attribute in each placeholder's place, serialized one at a time as the
file is written: what the export would have written, byte for byte (a nested message serializes
as it does alone).

Before: NodeProto(attribute=[AttributeProto(nodes_values, floats=[...4.85M...])]) in the export.
After:  NodeProto(attribute=[AttributeProto(nodes_values, doc_string="\\0held-list:3", type=FLOATS)])
        in the export; the written file is the same.
Limits: only for a ModelProto that goes straight to `save_model(..., lists=)`; `held` puts the
graph's protos back when the export is done, so nothing else sees a placeholder."""

from __future__ import annotations

from contextlib import contextmanager

import onnx
import onnx_graphsurgeon as gs

from ..graph_utils import iter_scopes
from .io import RawAttribute
from .long_lists import _long
from .wire import fields

_MARK = "\0held-list:"
_DOC_STRING = 13  # AttributeProto.doc_string


class AttributePiece:
    """A held attribute's serialized bytes, made when written (writer.write_pieces)."""

    def __init__(self, proto: onnx.AttributeProto):
        self.proto = proto
        self.length = proto.ByteSize()

    def __len__(self) -> int:
        return self.length

    def bytes(self) -> bytes:
        return self.proto.SerializeToString()


class HeldLists:
    """The long list attributes a graph's export left as placeholders, by token."""

    def __init__(self):
        self.protos: dict[bytes, onnx.AttributeProto] = {}

    def __bool__(self) -> bool:  # nothing held: the writer walks no attribute for it
        return bool(self.protos)

    def placeholder(self, proto: onnx.AttributeProto) -> onnx.AttributeProto:
        token = f"{_MARK}{len(self.protos)}"
        self.protos[token.encode()] = proto
        return onnx.AttributeProto(name=proto.name, doc_string=token, type=proto.type)

    def rewrite(self, buf, start: int, end: int) -> list | None:
        """writer.layout_model's `plain` rewrite: a placeholder's pieces, the held attribute."""
        for field, wire, _, pstart, fend in fields(buf, start, end):
            if field == _DOC_STRING and wire == 2:
                proto = self.protos.get(bytes(buf[pstart:fend]))
                return None if proto is None else [AttributePiece(proto)]
        return None


@contextmanager
def held(graph: gs.Graph):
    """Within the block, the graph's long list attributes (RawAttribute, all scopes) are
    placeholders: export it there, and write the export with `save_model(..., lists=)` after."""
    lists = HeldLists()
    swapped = []
    for scope in iter_scopes(graph):
        for node in scope.graph.nodes:
            for value in node.attrs.values():
                if isinstance(value, RawAttribute) and _long(value.proto):
                    swapped.append((value, value.proto))
                    value.proto = lists.placeholder(value.proto)
    try:
        yield lists
    finally:
        for value, proto in swapped:
            value.proto = proto
