"""Hypothesis strategies built from proto descriptors: random, hostile and malformed requests.

`messages(descriptor, ids)` draws any message of a type: every field optional, edge-case
numbers, unknown enum numbers, huge and odd strings, deep and wide Structs, at most one
field of each oneof. String fields often take a real id from `ids` so calls reach past
validation into the services. `wire(...)` serializes a message and may then corrupt the
bytes (unknown fields, invalid UTF-8 in a string field, truncation, random bytes), to be
sent with identity serializers. `metadata(keys)` draws call metadata, authorization included.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf import descriptor as pb
from google.protobuf import message_factory, struct_pb2
from google.protobuf.message import Message
from hypothesis import strategies as st

F = pb.FieldDescriptor
MAX_DEPTH = 3
HUGE = 300_000  # longer than any field limit of the API (content: 100,000 characters)
INT_RANGES: dict[int, tuple[int, int]] = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
}

# Text a protobuf string may hold (no lone surrogates), biased towards the awkward.
odd_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
strings = st.one_of(
    st.just(""),
    ascii_text,
    odd_text,
    st.sampled_from([" ", "\x00", "\n\t", "../../etc/passwd", "%s%n", "' OR 1=1 --", "{}", "null", "🙂" * 10]),
    st.tuples(st.sampled_from("xé🙂\x00"), st.integers(0, HUGE)).map(lambda t: t[0] * t[1]),  # huge, cheap to draw
)


def integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted((e for e in {low, high, 0, 1, -1, 2**31 - 1, -(2**31), 2**32, 2**53} if low <= e <= high), key=abs)
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def structs(depth: int = 0) -> st.SearchStrategy[struct_pb2.Struct]:
    """Structs deep (nested lists and objects) or wide (many keys), with JSON-hostile numbers."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        strings,
    )
    values = st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(odd_text, inner, max_size=4)),
        max_leaves=20,
    )
    deep = st.integers(1, 150).map(nested)
    wide = st.integers(0, 5_000).map(lambda n: {f"k{i}": i for i in range(n)})
    shaped = st.one_of(st.dictionaries(odd_text, values, max_size=6), deep, wide)
    return shaped.map(to_struct)


def nested(depth: int) -> dict[str, Any]:
    value: Any = "bottom"
    for i in range(depth):
        value = {"n": value} if i % 2 else [value]
    return {"deep": value}


def to_struct(data: dict[str, Any]) -> struct_pb2.Struct:
    result = struct_pb2.Struct()
    result.update(data)
    return result


def scalar(field: pb.FieldDescriptor, ids: Sequence[str]) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == F.TYPE_STRING:
        return st.one_of(st.sampled_from(list(ids)), strings) if ids else strings
    if kind == F.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.integers(0, HUGE).map(lambda n: b"\xff" * n))
    if kind == F.TYPE_BOOL:
        return st.booleans()
    if kind == F.TYPE_DOUBLE:
        return st.floats(allow_nan=True, allow_infinity=True)
    if kind == F.TYPE_FLOAT:
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    if kind == F.TYPE_ENUM:
        assert field.enum_type is not None
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), integers(-(2**31), 2**31 - 1))  # unknown numbers too
    low, high = INT_RANGES[kind]
    return integers(low, high)


def messages(descriptor: Any, ids: Sequence[str] = (), depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of this type; deeper messages get sparser until MAX_DEPTH cuts them off."""
    if descriptor.full_name == "google.protobuf.Struct":
        return structs()
    cls = message_factory.GetMessageClass(descriptor)
    if depth > MAX_DEPTH:
        return st.just(cls())
    plain = {f.name: field_values(f, ids, depth) for f in descriptor.fields if f.containing_oneof is None}
    oneofs = [
        st.one_of(st.none(), *(field_values(f, ids, depth).map(_named(f.name)) for f in oneof.fields))
        for oneof in descriptor.oneofs
        if not oneof.name.startswith("_")  # proto3 `optional` fields are plain fields
    ]
    optional = {f.name: field_values(f, ids, depth) for f in descriptor.fields if _synthetic_optional(f)}
    plain.update(optional)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        chosen = draw(st.fixed_dictionaries({}, optional=plain))
        for oneof in oneofs:
            picked = draw(oneof)
            if picked is not None:
                chosen.update([picked])
        message = cls()
        for name, value in chosen.items():
            assign(message, descriptor.fields_by_name[name], value)
        return message

    return build()


def _named(name: str) -> Callable[[Any], tuple[str, Any]]:
    return lambda value: (name, value)


def _synthetic_optional(field: pb.FieldDescriptor) -> bool:
    oneof = field.containing_oneof
    return oneof is not None and oneof.name.startswith("_")


def field_values(field: pb.FieldDescriptor, ids: Sequence[str], depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return st.dictionaries(scalar(key_field, ids), single(value_field, ids, depth + 1), max_size=4)
    element = single(field, ids, depth + 1)
    if field.is_repeated:
        return st.lists(element, max_size=4 if depth else 6)
    return element


def single(field: pb.FieldDescriptor, ids: Sequence[str], depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None:
        return messages(field.message_type, ids, depth)
    return scalar(field, ids)


def assign(message: Message, field: pb.FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        for key, item in value.items():
            if isinstance(item, Message):
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif field.is_repeated:
        if field.message_type is not None:
            for item in value:
                target.add().CopyFrom(item)
        else:
            target.extend(value)
    elif field.message_type is not None:
        target.CopyFrom(value)
    else:
        setattr(message, field.name, value)


# --------------------------------------------------------------------------- the wire


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def unknown_field(number: int, wire_type: int, payload: bytes) -> bytes:
    """A field the message does not declare, of any wire type (all legal to skip)."""
    if wire_type == 0:
        return tag(number, 0) + varint(int.from_bytes(payload[:8].ljust(8, b"\0"), "little"))
    if wire_type == 1:
        return tag(number, 1) + payload[:8].ljust(8, b"\0")
    if wire_type == 5:
        return tag(number, 5) + struct.pack("<I", len(payload))
    return tag(number, 2) + varint(len(payload)) + payload


def bad_utf8_field(descriptor: Any) -> bytes:
    """A declared string field (or, lacking one, field 1) carrying bytes that are not UTF-8."""
    numbers = [f.number for f in descriptor.fields if f.type == F.TYPE_STRING] or [1]
    return tag(numbers[0], 2) + varint(4) + b"\xff\xfe\xc3\x28"


@st.composite
def wire(draw: st.DrawFn, message: Message) -> bytes:
    """The message's bytes, intact or corrupted."""
    data = message.SerializeToString()
    how = draw(st.sampled_from(["intact", "intact", "unknown", "bad_utf8", "truncate", "random", "flip"]))
    if how == "unknown":
        number = draw(st.integers(1, 2**29 - 1).filter(lambda n: n not in message.DESCRIPTOR.fields_by_number))
        wire_type = draw(st.sampled_from([0, 1, 2, 5]))
        return data + unknown_field(number, wire_type, draw(st.binary(max_size=32)))
    if how == "bad_utf8":
        return data + bad_utf8_field(message.DESCRIPTOR)
    if how == "truncate" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "random":
        return draw(st.binary(max_size=256))
    if how == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    return data


# --------------------------------------------------------------------------- metadata

# Headers the HTTP/2 transport owns; a client may not set them, so they are not fuzzed.
RESERVED = {"te", "content-type", "user-agent", "host", "connection", "authorization"}
metadata_keys = st.from_regex(r"[a-z0-9][a-z0-9_.\-]{0,24}", fullmatch=True).filter(
    lambda k: k not in RESERVED and not k.startswith("grpc-") and not k.endswith("-bin")
)
header_values = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80),
    st.integers(0, 6_000).map(lambda n: "v" * n),
)


def authorization(keys: dict[str, str]) -> st.SearchStrategy[list[tuple[str, str]]]:
    """Mostly a valid key (so calls go deeper), else every way to get authorization wrong."""
    valid = [[("authorization", f"Bearer {key}")] for key in keys.values()]
    wrong = st.one_of(
        st.just([]),
        st.just([("authorization", "Bearer")]),
        st.just([("authorization", "Bearer    ")]),
        st.just([("authorization", "Basic dXNlcjpwYXNz")]),
        header_values.map(lambda v: [("authorization", v)]),
        header_values.map(lambda v: [("authorization", f"Bearer {v}")]),
        st.sampled_from(list(keys.values())).map(lambda k: [("authorization", f"bearer  {k}  ")]),
        st.sampled_from(list(keys.values())).map(lambda k: [("authorization", f"Bearer {k}x")]),
        st.sampled_from(list(keys.values())).map(  # two headers: the first one counts
            lambda k: [("authorization", "Bearer nope"), ("authorization", f"Bearer {k}")]
        ),
    )
    # About 3 in 4 calls carry a valid key, so most of them reach past authentication.
    return st.integers(0, 3).flatmap(lambda n: wrong if n == 0 else st.sampled_from(valid))


def metadata(keys: dict[str, str]) -> st.SearchStrategy[tuple[tuple[str, str | bytes], ...]]:
    extra = st.lists(
        st.one_of(
            st.tuples(metadata_keys, header_values),
            st.tuples(metadata_keys.map(lambda k: k + "-bin"), st.binary(max_size=64)),
            st.tuples(st.sampled_from(["traceparent", "tracestate", "baggage"]), header_values),
        ),
        max_size=4,
    )
    return st.tuples(authorization(keys), extra).map(lambda pair: tuple(pair[0] + pair[1]))
