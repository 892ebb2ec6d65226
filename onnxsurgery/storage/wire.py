"""The protobuf wire format of ONNX models, just enough to find tensors and rewrite them
without parsing their payloads. Field numbers are those of onnx.proto."""

from __future__ import annotations

from typing import Callable

# Length-delimited fields to descend into, per message type.
CHILDREN = {
    "model": {7: "graph"},                      # ModelProto.graph
    "graph": {1: "node", 5: "tensor"},          # GraphProto.node, .initializer
    "node": {5: "attr"},                        # NodeProto.attribute
    "attr": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph"},  # t, g, tensors, graphs
}
RAW_DATA, EXTERNAL_DATA, DATA_LOCATION = 9, 13, 14  # TensorProto fields
EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


class Malformed(Exception):
    pass


def varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Malformed
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fields(buf, start: int, end: int):
    """Yield (field, wire_type, field_start, payload_start, field_end)."""
    # one-byte varints (keys, most lengths and numbers) read here rather than through varint(),
    # whose call was most of a walk's time (every node of a graph is walked for its attributes)
    size = len(buf)
    pos = start
    while pos < end:
        key = buf[pos] if pos < size else 0x80
        if key < 0x80:
            p = pos + 1
        else:
            key, p = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n = buf[p] if p < size else 0x80
            if n < 0x80:
                p += 1
            else:
                n, p = varint(buf, p)
            q = p + n
        elif wire == 0:
            q = p + 1 if p < size and buf[p] < 0x80 else varint(buf, p)[1]
        elif wire == 1:
            q = p + 8
        elif wire == 5:
            q = p + 4
        else:
            raise Malformed
        if q > end or field == 0:
            raise Malformed
        yield field, wire, pos, p, q
        pos = q


def len_field_header(field: int, length: int) -> bytes:
    return encode_varint(field << 3 | 2) + encode_varint(length)


def len_field(field: int, payload) -> bytes:
    return len_field_header(field, len(payload)) + bytes(payload)


def external_fields(location: str, offset: int, length: int) -> bytes:
    """TensorProto fields that point a tensor at external data."""
    entries = b"".join(
        len_field(EXTERNAL_DATA, len_field(1, k.encode()) + len_field(2, v.encode()))
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length)))
    )
    return entries + encode_varint(DATA_LOCATION << 3) + encode_varint(EXTERNAL)


# AttributeProto.type (field 20, a varint) as serializers write it, last (fields in number
# order), for the types that hold no tensor or graph: FLOAT, INT, STRING, FLOATS, INTS, STRINGS
_TYPE_KEY = bytes([20 << 3 & 0x7F | 0x80, 20 << 3 >> 7])
_PLAIN_TYPES = frozenset({1, 2, 3, 6, 7, 8})


def _plain_attribute(buf, start: int, end: int) -> bool:
    """Whether the attribute buf[start:end] ends with a type that holds no tensor or graph. Its
    repeated numbers are one wire field each (onnx.proto is proto2, unpacked): a tree
    ensemble's 2 MB of them took 6.4M fields to walk, 0.5 s a read, read 9 times by one
    `quant`. A tensor attribute whose payload happens to end in these three bytes is only left
    parsed in memory, not referenced into the file: the same values either way."""
    return end - start >= 3 and buf[end - 3:end - 1] == _TYPE_KEY and buf[end - 1] in _PLAIN_TYPES


_LIST_TYPES = frozenset({6, 7, 8})  # FLOATS, INTS, STRINGS
# lists that are values, not tables: a Constant's (a weight to passes and info), a LabelEncoder's
# keys (generated inputs are drawn from them: running/feeds.py)
_VALUE_LISTS = frozenset({b"value_floats", b"value_ints", b"value_strings", b"keys_strings", b"classes_strings"})


def emptied_long_list(min_bytes: int) -> TensorRewrite:
    """A `plain` rewrite that keeps a list attribute of `min_bytes` or more as its name and type
    alone (an empty list): its first field (the name, field 1, as serializers write it) and its
    type (the last three bytes, `_plain_attribute`). Other attributes, and lists that are values
    (_VALUE_LISTS), are kept."""

    def rewrite(buf, start: int, end: int) -> list | None:
        if end - start < min_bytes or buf[end - 1] not in _LIST_TYPES:
            return None
        field, wire, _, name_start, name_end = next(fields(buf, start, end))
        if field != 1 or wire != 2 or bytes(buf[name_start:name_end]) in _VALUE_LISTS:
            return None
        return [buf[start:name_end], buf[end - 3:end]]

    return rewrite


TensorRewrite = Callable[[memoryview, int, int], "list | None"]


def rewrite_tensors(buf, rewrite: TensorRewrite, start: int = 0, end: int | None = None,
                    kind: str = "model", plain: TensorRewrite | None = None) -> list | None:
    """Walk the message buf[start:end] of type `kind` and every tensor inside it (initializers
    and tensor attributes, in all subgraphs). `rewrite(buf, start, end)` returns a tensor's new
    pieces (bytes-likes, or objects with a len) or None to keep it; `plain`, likewise, an
    attribute's that holds no tensor or graph (`_plain_attribute`). Returns the message's new
    pieces, or None when nothing inside changed; enclosing lengths are re-encoded from the sum
    of the pieces' lengths."""
    end = len(buf) if end is None else end
    if kind == "tensor":
        return rewrite(buf, start, end)
    if kind == "attr" and _plain_attribute(buf, start, end):
        return None if plain is None else plain(buf, start, end)
    children = CHILDREN[kind]
    out: list = []
    last = start
    for field, wire, fstart, pstart, fend in fields(buf, start, end):
        if wire == 2 and field in children:
            sub = rewrite_tensors(buf, rewrite, pstart, fend, children[field], plain)
            if sub is not None:
                out.append(buf[last:fstart])
                out.append(len_field_header(field, sum(len(p) for p in sub)))
                out.extend(sub)
                last = fend
    if not out:
        return None
    out.append(buf[last:end])
    return out
