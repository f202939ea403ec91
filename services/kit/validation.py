"""The field rules the protos declare (buf.validate annotations), enforced on every request.

Each request field's rules are written once, on the protos, with protovalidate's standard
annotations (protos/README.md); clients in other languages can run the same rules with
protovalidate-go or protovalidate-es. The protovalidate package interprets every rule as a
CEL expression, about 5 ms a message: too slow for each request. So this module compiles the
standard rules of a message type, once, into plain Python checks (the type's `Check`, cached
by descriptor; a type without rules, itself or in the messages it holds, costs one dict
lookup). A type carrying a rule not compiled here (a CEL expression, a well-known string
format, duration and timestamp bounds, wrapper types...) is checked by the protovalidate
package itself, so every annotation holds; `tests/unit/test_validation_rules.py` holds the
compiled checks to the package's verdicts.

A violation names the field as protovalidate spells its path (`session_id`, `labels["team"]`,
`client_tools[0].name`) and the rule's id (`string.max_len`); its description is
protovalidate's, a few reworded to read better after the path ("is required", "unknown value
7", "must be between 0 and 200"). `ValidationInterceptor`, which services/kit/server.py
installs on every server, checks each request (each message of a client stream) before the
servicer runs: a violation is INVALID_ARGUMENT with BadRequest field violations
(errors.InvalidArgument). `check` does the same for a message a servicer unwraps itself
(a Converse frame).
"""

from __future__ import annotations

import inspect
import json
import math
import operator
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import grpc
import re2
from buf.validate import validate_pb2
from google.protobuf import descriptor_pool, message_factory, unknown_fields
from google.protobuf.descriptor import Descriptor, FieldDescriptor, OneofDescriptor
from google.protobuf.message import Message

from services.kit.errors import InvalidArgument


class Violation(NamedTuple):
    field: str  # protovalidate's path: session_id, labels["team"], client_tools[0].name ("" for the message)
    rule: str  # protovalidate's rule id: string.max_len, required, message.oneof...
    description: str  # what is wrong, read after the path


class RuleError(Exception):
    """An annotation that cannot be applied: rules of another type than the field's, a bad pattern."""


class _Unsupported(Exception):
    """A rule this module does not compile: the message type is left to the protovalidate package."""


# Appends the violations of a message (its path so far: "" or "parent.", "items[2].") to a list.
Check = Callable[[Message, str, list[Violation]], None]
# One rule on one value: None, or its (rule id, description).
ValueRule = Callable[[Any], tuple[str, str] | None]

_T = FieldDescriptor
_INTEGERS = {
    _T.TYPE_INT32: "int32",
    _T.TYPE_INT64: "int64",
    _T.TYPE_UINT32: "uint32",
    _T.TYPE_UINT64: "uint64",
    _T.TYPE_SINT32: "sint32",
    _T.TYPE_SINT64: "sint64",
    _T.TYPE_FIXED32: "fixed32",
    _T.TYPE_FIXED64: "fixed64",
    _T.TYPE_SFIXED32: "sfixed32",
    _T.TYPE_SFIXED64: "sfixed64",
}
_FLOATS = {_T.TYPE_FLOAT: "float", _T.TYPE_DOUBLE: "double"}
_SCALARS = {**_INTEGERS, **_FLOATS, _T.TYPE_BOOL: "bool", _T.TYPE_STRING: "string", _T.TYPE_BYTES: "bytes"}
# Rules on a message field that only the protovalidate package checks.
_MESSAGE_RULES = {"any", "duration", "timestamp", "field_mask"}
# The option extensions (typed as plain fields by the generated stubs).
_FIELD: Any = validate_pb2.field
_MESSAGE: Any = validate_pb2.message
_ONEOF: Any = validate_pb2.oneof
_IGNORE_ALWAYS = validate_pb2.IGNORE_ALWAYS
_IGNORE_IF_ZERO = validate_pb2.IGNORE_IF_ZERO_VALUE

# Per message type, compiled once: its check (None: no rules in it or what it holds), and whether it holds rules.
_plans: dict[Descriptor, Check | None] = {}
_holds: dict[Descriptor, bool] = {}
_UNSEEN: Any = object()


# --------------------------------------------------------------------------- entry points


def violations(message: Message) -> list[Violation]:
    """Every rule `message` breaks, in protovalidate's order; [] when it keeps them all."""
    kind: Descriptor = message.DESCRIPTOR  # type: ignore[assignment]  # upb's Descriptor is the same type at runtime
    plan = _plans.get(kind, _UNSEEN)
    if plan is _UNSEEN:
        plan = plan_of(kind)
    found: list[Violation] = []
    if plan is not None:
        plan(message, "", found)
    return found


def check(message: Message, prefix: str = "") -> None:
    """Raise InvalidArgument naming every broken rule (paths under `prefix`, e.g. "message.")."""
    found = violations(message)
    if found:
        raise InvalidArgument([(f"{prefix}{v.field}", v.description) for v in found])


def plan_of(kind: Descriptor) -> Check | None:
    """The compiled check of a message type, None when neither it nor what it holds has rules."""
    try:
        return _plans[kind]
    except KeyError:
        pass
    plan = _compile(kind) if _holds_rules(kind) else None  # None too when its rules ask nothing (required=false)
    _plans[kind] = plan
    return plan


def field_path(path: validate_pb2.FieldPath) -> str:
    """A protovalidate FieldPath as text, as protovalidate-go writes it: `a.b[0].c["key"]`."""
    parts = []
    for element in path.elements:
        subscript = element.WhichOneof("subscript")
        if subscript is None:
            parts.append(element.field_name)
        elif subscript == "string_key":
            parts.append(f"{element.field_name}[{json.dumps(element.string_key, ensure_ascii=False)}]")
        elif subscript == "bool_key":
            parts.append(f"{element.field_name}[{'true' if element.bool_key else 'false'}]")
        else:
            parts.append(f"{element.field_name}[{getattr(element, subscript)}]")
    return ".".join(parts)


class ValidationInterceptor(grpc.aio.ServerInterceptor):
    """Checks each request of every RPC whose request type has rules, before the servicer sees it.

    Installed innermost (after authentication): a violation raises InvalidArgument, which the
    kit's ErrorMappingInterceptor sends as INVALID_ARGUMENT with BadRequest. A method whose
    request type has no rules gets its handler back untouched.
    """

    def __init__(self) -> None:
        self._plans: dict[str, Check | None] = {}

    def _plan(self, method: str) -> Check | None:
        try:
            return self._plans[method]
        except KeyError:
            pass
        service, _, name = method[1:].rpartition("/")  # "/cogmesh.gateway.v1.GatewayService/SendMessage"
        try:
            found = descriptor_pool.Default().FindMethodByName(f"{service}.{name}")
        except KeyError:
            plan = None  # not a protobuf service this process knows: nothing declares rules for it
        else:
            plan = plan_of(found.input_type)
        self._plans[method] = plan
        return plan

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler: Any = await continuation(handler_call_details)
        if handler is None:
            return None
        return handler if self._plan(handler_call_details.method) is None else _checking(handler)


# --------------------------------------------------------------------------- the interceptor's handlers


def _checking(handler: Any) -> Any:
    """`handler` with every request checked against its type's rules first."""

    def checked(request: Any) -> Any:
        check(request)
        return request

    async def each(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for request in requests:
            yield checked(request)

    deserialize, serialize = handler.request_deserializer, handler.response_serializer
    if handler.unary_unary or handler.stream_unary:
        inner_u = handler.unary_unary or handler.stream_unary
        prepare = checked if handler.unary_unary else each

        async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            return await inner_u(prepare(request), context)

        factory = grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
        return factory(unary, deserialize, serialize)

    inner_s = handler.unary_stream or handler.stream_stream
    arrange = checked if handler.unary_stream else each
    streaming: Any
    if inspect.isasyncgenfunction(inner_s):

        async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            responses = inner_s(arrange(request), context)
            try:
                async for item in responses:
                    yield item
            finally:
                await responses.aclose()  # here, in the RPC's task, not later by the garbage collector

    else:  # a coroutine that streams with context.write()

        async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await inner_s(arrange(request), context)

    factory_s = grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
    return factory_s(streaming, deserialize, serialize)


# --------------------------------------------------------------------------- which types have rules


def _field_rules(field: FieldDescriptor) -> validate_pb2.FieldRules | None:
    options = field.GetOptions()
    return options.Extensions[_FIELD] if options.HasExtension(_FIELD) else None


def _map_entry(field: FieldDescriptor) -> Descriptor | None:
    """The entry type of a map field (its key and value fields), None for any other field."""
    kind = field.message_type
    return kind if kind is not None and kind.GetOptions().map_entry else None


def _recursed(field: FieldDescriptor) -> Descriptor | None:
    """The message type protovalidate checks inside `field` (map values included), or None."""
    rules = _field_rules(field)
    if rules is not None and (rules.ignore == _IGNORE_ALWAYS or rules.repeated.items.ignore == _IGNORE_ALWAYS):
        return None
    entry = _map_entry(field)
    return entry.fields_by_name["value"].message_type if entry is not None else field.message_type


def _own_rules(kind: Descriptor) -> bool:
    return (
        kind.GetOptions().HasExtension(_MESSAGE)
        or any(o.GetOptions().HasExtension(_ONEOF) for o in kind.oneofs)
        or any(_field_rules(f) is not None for f in kind.fields)
    )


def _holds_rules(kind: Descriptor) -> bool:
    """Whether the type, or any message type it holds (through any depth, cycles included), has rules."""
    if kind not in _holds:
        seen, pending = {kind}, [kind]
        while pending:
            current = pending.pop()
            if _own_rules(current):
                _holds[kind] = True
                break
            for field in current.fields:
                nested = _recursed(field)
                if nested is not None and nested not in seen:
                    seen.add(nested)
                    pending.append(nested)
        else:
            _holds[kind] = False
    return _holds[kind]


# --------------------------------------------------------------------------- compiling a message type


def _compile(kind: Descriptor) -> Check | None:
    """The type's check, in protovalidate's order: message rules, oneofs, then each field and what it holds."""
    try:
        checks = _message_checks(kind)
    except _Unsupported:
        return _protovalidate_check(kind)
    if len(checks) <= 1:
        return checks[0] if checks else None

    def run(message: Message, prefix: str, out: list[Violation]) -> None:
        for one in checks:
            one(message, prefix, out)

    return run


def _message_checks(kind: Descriptor) -> list[Check]:
    checks: list[Check] = []
    in_message_oneofs: set[str] = set()
    options = kind.GetOptions()
    if options.HasExtension(_MESSAGE):
        rules = options.Extensions[_MESSAGE]
        if rules.cel or rules.cel_expression:
            raise _Unsupported(f"{kind.full_name}: CEL rules")
        _no_unknown(rules, kind.full_name)
        for rule in rules.oneof:
            checks.append(_message_oneof(kind, rule))
            in_message_oneofs.update(rule.fields)
    for oneof in kind.oneofs:
        if oneof.GetOptions().HasExtension(_ONEOF):
            required = oneof.GetOptions().Extensions[_ONEOF].required
            if required:
                checks.append(_oneof_required(oneof))
    for field in kind.fields:
        rules = _field_rules(field)
        if rules is not None:
            if rules.ignore == _IGNORE_ALWAYS:
                continue
            if field.name in in_message_oneofs and not rules.HasField("ignore"):
                rules = _with_ignore(rules, _IGNORE_IF_ZERO)
            one = _field_check(field, rules)
            if one is not None:
                checks.append(one)
        nested = _recursed(field)
        if nested is not None and _holds_rules(nested):
            checks.append(_nested_check(field, nested))
    return checks


def _with_ignore(rules: validate_pb2.FieldRules, ignore: int) -> validate_pb2.FieldRules:
    copy = validate_pb2.FieldRules()
    copy.CopyFrom(rules)
    copy.ignore = ignore  # type: ignore[assignment]
    return copy


def _no_unknown(rules: Message, where: str) -> None:
    if len(unknown_fields.UnknownFieldSet(rules)) > 0:
        raise RuleError(f"{where}: unknown rules in {rules.DESCRIPTOR.full_name} (a newer validate.proto?)")


def _is_empty(field: FieldDescriptor) -> Callable[[Message], bool]:
    """protovalidate's "unset": not present, an empty list or map, or the zero value."""
    name = field.name
    if field.has_presence:
        return lambda message: not message.HasField(name)
    if field.is_repeated:
        return lambda message: not getattr(message, name)
    default = field.default_value
    return lambda message: getattr(message, name) == default


def _message_oneof(kind: Descriptor, rule: validate_pb2.MessageOneofRule) -> Check:
    names = list(rule.fields)
    if not names:
        raise RuleError(f"{kind.full_name}: a (buf.validate.message).oneof rule names no field")
    unknown = [n for n in names if n not in kind.fields_by_name]
    if unknown or len(set(names)) != len(names):
        raise RuleError(f"{kind.full_name}: (buf.validate.message).oneof fields {names} (unknown or repeated)")
    empties = [_is_empty(kind.fields_by_name[n]) for n in names]
    listed, required = ", ".join(names), rule.required

    def one_of(message: Message, prefix: str, out: list[Violation]) -> None:
        given = sum(1 for empty in empties if not empty(message))
        if given > 1:
            out.append(Violation(prefix[:-1], "message.oneof", f"only one of {listed} can be set"))
        if required and given == 0:
            out.append(Violation(prefix[:-1], "message.oneof", f"one of {listed} must be set"))

    return one_of


def _oneof_required(oneof: OneofDescriptor) -> Check:
    name = oneof.name
    members = [f.name for f in oneof.fields]
    description = (
        f"is required: one of {', '.join(members[:-1])} or {members[-1]}" if len(members) > 1 else "is required"
    )

    def required(message: Message, prefix: str, out: list[Violation]) -> None:
        if message.WhichOneof(name) is None:
            out.append(Violation(prefix + name, "required", description))

    return required


def _nested_check(field: FieldDescriptor, nested: Descriptor) -> Check:
    """Recursion into the messages a field holds: one, each of a list, each value of a map."""
    name, entry = field.name, _map_entry(field)
    if entry is not None:
        key = _key_text(entry.fields_by_name["key"])

        def each_value(message: Message, prefix: str, out: list[Violation]) -> None:
            values = getattr(message, name)
            if values:
                plan = plan_of(nested)  # here, not when compiling: types may hold each other
                if plan is None:
                    return
                for k, value in values.items():
                    plan(value, f"{prefix}{name}[{key(k)}].", out)

        return each_value
    if field.is_repeated:

        def each_item(message: Message, prefix: str, out: list[Violation]) -> None:
            items = getattr(message, name)
            if items:
                plan = plan_of(nested)  # here, not when compiling: types may hold each other
                if plan is None:
                    return
                for i, item in enumerate(items):
                    plan(item, f"{prefix}{name}[{i}].", out)

        return each_item

    def one(message: Message, prefix: str, out: list[Violation]) -> None:
        if message.HasField(name):
            plan = plan_of(nested)
            if plan is not None:
                plan(getattr(message, name), f"{prefix}{name}.", out)

    return one


def _key_text(key: FieldDescriptor) -> Callable[[Any], str]:
    if key.type == _T.TYPE_STRING:
        return lambda k: json.dumps(k, ensure_ascii=False)
    if key.type == _T.TYPE_BOOL:
        return lambda k: "true" if k else "false"
    return str


def _protovalidate_check(kind: Descriptor) -> Check:
    """The type's rules checked by the protovalidate package (a rule not compiled here)."""
    validator = _protovalidate()
    try:  # compile the type's rules now: a bad annotation fails here, not on a request
        validator.collect_violations(message_factory.GetMessageClass(kind)())
    except Exception as exc:
        raise RuleError(f"{kind.full_name}: protovalidate cannot compile its rules: {exc}") from exc

    def package(message: Message, prefix: str, out: list[Violation]) -> None:
        for found in validator.collect_violations(message):
            v = found.proto
            path = field_path(v.field)
            where = f"{prefix}{path}" if path else prefix[:-1]
            out.append(Violation(where, v.rule_id, f"key {v.message}" if v.for_key else v.message))

    return package


_validator: Any = None


def _protovalidate() -> Any:
    """One protovalidate.Validator (it caches each type's compiled CEL); imported when first needed (~0.3 s)."""
    global _validator
    if _validator is None:
        import protovalidate

        _validator = protovalidate.Validator()  # type: ignore[no-untyped-call]
    return _validator


# --------------------------------------------------------------------------- one field


def _field_check(field: FieldDescriptor, rules: validate_pb2.FieldRules) -> Check | None:
    """protovalidate's FieldRules.validate: `required` and emptiness first, then the type's rules."""
    if rules.cel or rules.cel_expression:
        raise _Unsupported(f"{field.full_name}: CEL rules")
    _no_unknown(rules, field.full_name)
    name, required = field.name, rules.required
    skip_empty = rules.ignore == _IGNORE_IF_ZERO or field.has_presence
    empty = _is_empty(field)
    value_rules: list[ValueRule] = []
    items: Check | None = None
    entry = _map_entry(field)
    if entry is not None:
        value_rules, items = _map_rules(field, entry, rules)
    elif field.is_repeated:
        value_rules, items = _repeated_rules(field, rules)
    else:
        value_rules = _value_rules(field, rules)
    if not (required or value_rules or items):
        return None

    def one_field(message: Message, prefix: str, out: list[Violation]) -> None:
        if empty(message):
            if required:
                out.append(Violation(prefix + name, "required", "is required"))
                return
            if skip_empty:
                return
        value = getattr(message, name)
        for rule in value_rules:
            broken = rule(value)
            if broken is not None:
                out.append(Violation(prefix + name, *broken))
        if items is not None:
            items(message, prefix, out)

    return one_field


def _repeated_rules(field: FieldDescriptor, rules: validate_pb2.FieldRules) -> tuple[list[ValueRule], Check | None]:
    kind = rules.WhichOneof("type")
    if kind is None:
        return [], None
    if kind != "repeated":
        raise RuleError(f"{field.full_name}: {kind} rules on a repeated field (use repeated.items)")
    found: list[ValueRule] = []
    repeated = rules.repeated
    _no_unknown(repeated, field.full_name)
    for rule, value in repeated.ListFields():
        if rule.name == "min_items":
            found.append(_at_least(value, "repeated.min_items", "item"))
        elif rule.name == "max_items":
            found.append(_at_most(value, "repeated.max_items", "item"))
        elif rule.name == "unique" and value:
            if field.message_type is not None:
                raise _Unsupported(f"{field.full_name}: repeated.unique on messages")
            found.append(_unique)
        elif rule.name != "items":
            raise _Unsupported(f"{field.full_name}: repeated.{rule.name}")
    if not repeated.HasField("items") or repeated.items.ignore == _IGNORE_ALWAYS:
        return found, None
    item_rules = _value_rules(field, repeated.items, item=True)
    if repeated.items.cel or repeated.items.cel_expression:
        raise _Unsupported(f"{field.full_name}: CEL rules on items")
    if not item_rules:
        return found, None
    name, skip_empty = field.name, repeated.items.ignore == _IGNORE_IF_ZERO

    def each_item(message: Message, prefix: str, out: list[Violation]) -> None:
        for i, item in enumerate(getattr(message, name)):
            if skip_empty and not item:
                continue
            for rule in item_rules:
                broken = rule(item)
                if broken is not None:
                    out.append(Violation(f"{prefix}{name}[{i}]", *broken))

    return found, each_item


def _map_rules(
    field: FieldDescriptor, entry: Descriptor, rules: validate_pb2.FieldRules
) -> tuple[list[ValueRule], Check | None]:
    kind = rules.WhichOneof("type")
    if kind is None:
        return [], None
    if kind != "map":
        raise RuleError(f"{field.full_name}: {kind} rules on a map field (use map.keys and map.values)")
    found: list[ValueRule] = []
    pairs = rules.map
    _no_unknown(pairs, field.full_name)
    for rule, value in pairs.ListFields():
        if rule.name == "min_pairs":
            found.append(_at_least(value, "map.min_pairs", "entry", "entries"))
        elif rule.name == "max_pairs":
            found.append(_at_most(value, "map.max_pairs", "entry", "entries"))
        elif rule.name not in ("keys", "values"):
            raise _Unsupported(f"{field.full_name}: map.{rule.name}")
    key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
    sides = []
    for side, side_field in (("values", value_field), ("keys", key_field)):  # values first, as protovalidate
        if not pairs.HasField(side):
            continue
        side_rules = getattr(pairs, side)
        if side_rules.cel or side_rules.cel_expression:
            raise _Unsupported(f"{field.full_name}: CEL rules on map {side}")
        if side_rules.ignore == _IGNORE_ALWAYS:
            continue
        compiled = _value_rules(side_field, side_rules, item=True)
        if compiled:
            sides.append((side == "keys", side_rules.ignore == _IGNORE_IF_ZERO, compiled))
    if not sides:
        return found, None
    name, key_text = field.name, _key_text(key_field)

    def each_pair(message: Message, prefix: str, out: list[Violation]) -> None:
        for k, v in getattr(message, name).items():
            for for_key, skip_empty, side_rules in sides:
                value = k if for_key else v
                if skip_empty and not value:
                    continue
                for rule in side_rules:
                    broken = rule(value)
                    if broken is not None:
                        rule_id, description = broken
                        where = f"{prefix}{name}[{key_text(k)}]"
                        out.append(Violation(where, rule_id, f"key {description}" if for_key else description))

    return found, each_pair


def _value_rules(field: FieldDescriptor, rules: validate_pb2.FieldRules, item: bool = False) -> list[ValueRule]:
    """The rules of one value (a scalar field, or a list's item, a map's key or value), in rule-number order."""
    kind = rules.WhichOneof("type")
    if kind is None:
        return []
    if kind in _MESSAGE_RULES:
        raise _Unsupported(f"{field.full_name}: {kind} rules")
    if field.type == _T.TYPE_MESSAGE:
        if kind in _SCALARS.values():  # a wrapper (google.protobuf.StringValue...): protovalidate unwraps it
            raise _Unsupported(f"{field.full_name}: {kind} rules on a wrapper type")
        raise RuleError(f"{field.full_name}: {kind} rules on a message field")
    expected = "enum" if field.type == _T.TYPE_ENUM else _SCALARS.get(field.type)
    if kind != expected:
        raise RuleError(f"{field.full_name}: {kind} rules on a field of type {expected}")
    typed = getattr(rules, kind)
    _no_unknown(typed, field.full_name)
    if kind == "string":
        return _string_rules(field, typed, item)
    if kind == "bytes":
        return _bytes_rules(field, typed)
    if kind == "enum":
        return _enum_rules(field, typed)
    if kind == "bool":
        return _bool_rules(field, typed)
    return _number_rules(field, typed, kind)


# --------------------------------------------------------------------------- the standard rules


def _plural(count: int, one: str, many: str = "") -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def _at_least(least: int, rule_id: str, one: str, many: str = "") -> ValueRule:
    if one == "character":  # a string's min_len: 1 is what a required id says
        description = "is required" if least == 1 else f"must be at least {_plural(least, one)}"
    elif one == "item character":  # an item, map key or value: "names[0]: is required" would read oddly
        description = "must not be empty" if least == 1 else f"must be at least {_plural(least, 'character')}"
    elif one == "byte":
        description = f"must be at least {_plural(least, one)}"
    else:
        description = f"must have at least {_plural(least, one, many)}"
    return lambda value: (rule_id, description) if len(value) < least else None


def _at_most(most: int, rule_id: str, one: str, many: str = "") -> ValueRule:
    if one in ("character", "byte"):
        description = f"must be at most {_plural(most, one)}"
        return lambda value: (rule_id, description) if len(value) > most else None
    limit = f"must have at most {_plural(most, one, many)}"
    return lambda value: (rule_id, f"{limit}, not {len(value)}") if len(value) > most else None


def _unique(values: Sequence[Any]) -> tuple[str, str] | None:
    return None if len(set(values)) == len(values) else ("repeated.unique", "must not repeat an item")


def _set_rules(field: FieldDescriptor, rules: Message, kind: str, known: Sequence[str]) -> dict[str, Any]:
    """The rules set on a typed rules message, by name, in rule-number order (protovalidate's order)."""
    found = {}
    for rule, value in rules.ListFields():
        if rule.is_extension:
            raise _Unsupported(f"{field.full_name}: predefined rule {rule.full_name}")
        if rule.name not in known:
            raise _Unsupported(f"{field.full_name}: {kind}.{rule.name}")  # well-known formats (email, uuid...)
        found[rule.name] = value
    found.pop("example", None)  # examples document, they do not constrain
    return found


_STRING_RULES = (
    *("const", "len", "min_len", "max_len", "len_bytes", "min_bytes", "max_bytes", "pattern"),
    *("prefix", "suffix", "contains", "not_contains", "in", "not_in", "example"),
)


def _string_rules(field: FieldDescriptor, rules: Message, item: bool) -> list[ValueRule]:
    found: list[ValueRule] = []
    for name, value in _set_rules(field, rules, "string", _STRING_RULES).items():
        rule_id = f"string.{name}"
        if name == "const":
            found.append(_equals(value, rule_id, f"must equal `{value}`"))
        elif name == "len":
            found.append(_exactly(value, rule_id, f"must be {_plural(value, 'character')}"))
        elif name == "min_len":
            found.append(_at_least(value, rule_id, "item character" if item else "character"))
        elif name == "max_len":
            found.append(_at_most(value, rule_id, "character"))
        elif name in ("len_bytes", "min_bytes", "max_bytes"):
            found.append(_utf8_length(name, value, rule_id))
        elif name == "pattern":
            found.append(_pattern(field, value, rule_id))
        elif name in ("in", "not_in"):
            found.append(_membership(name, list(value), rule_id, ", ".join(f"`{v}`" for v in value)))
        else:
            found.append(_substring(name, value, rule_id, f"`{value}`"))
    return found


_BYTES_RULES = ("const", "len", "min_len", "max_len", "prefix", "suffix", "contains", "in", "not_in", "example")


def _bytes_rules(field: FieldDescriptor, rules: Message) -> list[ValueRule]:
    found: list[ValueRule] = []
    for name, value in _set_rules(field, rules, "bytes", _BYTES_RULES).items():
        rule_id = f"bytes.{name}"
        if name == "const":
            found.append(_equals(value, rule_id, f"must be {value.hex()}"))
        elif name == "len":
            found.append(_exactly(value, rule_id, f"must be {_plural(value, 'byte')}"))
        elif name == "min_len":
            found.append(_at_least(value, rule_id, "byte"))
        elif name == "max_len":
            found.append(_at_most(value, rule_id, "byte"))
        elif name in ("in", "not_in"):
            found.append(_membership(name, list(value), rule_id, ", ".join(v.hex() for v in value)))
        else:
            found.append(_substring(name, value, rule_id, value.hex()))
    return found


def _equals(expected: Any, rule_id: str, description: str) -> ValueRule:
    return lambda value: None if value == expected else (rule_id, description)


def _exactly(size: int, rule_id: str, description: str) -> ValueRule:
    return lambda value: None if len(value) == size else (rule_id, description)


def _utf8_length(name: str, size: int, rule_id: str) -> ValueRule:
    test = {"len_bytes": operator.eq, "min_bytes": operator.ge, "max_bytes": operator.le}[name]
    wording = {"len_bytes": "must be", "min_bytes": "must be at least", "max_bytes": "must be at most"}[name]
    description = f"{wording} {_plural(size, 'byte')} (UTF-8)"
    return lambda value: None if test(len(value.encode()), size) else (rule_id, description)


def _pattern(field: FieldDescriptor, pattern: str, rule_id: str) -> ValueRule:
    """CEL's matches(): RE2, matching anywhere unless anchored. RE2's Python binding takes ~5 us a search,
    Python's re ~0.2 us, so a pattern within the syntax both read alike runs on re (see _python_pattern)."""
    try:
        compiled = re2.compile(pattern)
    except re2.error as exc:
        raise RuleError(f"{field.full_name}: string.pattern {pattern!r} is not an RE2 pattern: {exc}") from exc
    translated = _python_pattern(pattern)
    search = re.compile(translated).search if translated is not None else compiled.search
    description = f"does not match regex pattern `{pattern}`"
    return lambda value: None if search(value) else (rule_id, description)


_LITERAL_ESCAPES = frozenset("\\.^$*+?()[]{}|-/")


def _python_pattern(pattern: str) -> str | None:
    """The pattern for Python's re with RE2's meaning, or None when it uses syntax they may read apart.

    Kept: literals, escaped punctuation, \\xHH, classes of those, quantifiers, groups without `(?`,
    alternation, `.` and anchors; `$` becomes `\\Z` (Python's `$` also matches before a final newline,
    RE2's only at the end). Left to RE2: \\d, \\w, \\s, \\b (Unicode in Python, ASCII in RE2), flags, named
    and non-capturing groups, and what Python reads as set operations in a class ([[, &&, --, ||, ~~).
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            escaped = pattern[i + 1 : i + 2]
            if escaped == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", pattern[i + 2 : i + 4]):
                out.append(pattern[i : i + 4])
                i += 4
                continue
            if escaped not in _LITERAL_ESCAPES or not escaped:
                return None
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "[" or pattern[i : i + 2] in ("&&", "--", "||", "~~"):
                return None
            in_class = c != "]"
        elif c == "[":
            opening = "[^" if pattern[i + 1 : i + 2] == "^" else "["
            if pattern[i + len(opening) : i + len(opening) + 1] == "]":
                return None  # a leading ] is a literal: not worth following here
            out.append(opening)
            i += len(opening)
            in_class = True
            continue
        elif c == "$":
            c = "\\Z"
        elif c == "(" and pattern[i + 1 : i + 2] == "?":
            return None
        out.append(c)
        i += 1
    return None if in_class else "".join(out)


def _substring(name: str, part: Any, rule_id: str, shown: str) -> ValueRule:
    test: Callable[[Any], bool] = {
        "prefix": lambda value: value.startswith(part),
        "suffix": lambda value: value.endswith(part),
        "contains": lambda value: part in value,
        "not_contains": lambda value: part not in value,
    }[name]
    wording = {"prefix": "does not start with", "suffix": "does not end with", "contains": "does not contain"}
    description = f"{wording.get(name, 'contains')} {shown}"
    return lambda value: None if test(value) else (rule_id, description)


def _membership(name: str, values: list[Any], rule_id: str, listed: str) -> ValueRule:
    chosen = frozenset(values)
    if name == "in":
        return lambda value: None if value in chosen else (rule_id, f"must be one of {listed}")
    return lambda value: (rule_id, f"must not be one of {listed}") if value in chosen else None


def _bool_rules(field: FieldDescriptor, rules: Message) -> list[ValueRule]:
    return [
        _equals(value, "bool.const", f"must be {str(value).lower()}")
        for value in _set_rules(field, rules, "bool", ("const", "example")).values()
    ]


def _enum_rules(field: FieldDescriptor, rules: Message) -> list[ValueRule]:
    assert field.enum_type is not None
    values = field.enum_type.values_by_number

    def named(number: int) -> str:
        return values[number].name if number in values else str(number)

    found: list[ValueRule] = []
    known = ("const", "defined_only", "in", "not_in", "example")
    given = _set_rules(field, rules, "enum", known)
    if "const" in given:
        found.append(_equals(given["const"], "enum.const", f"must be {named(given['const'])}"))
    if "in" in given:
        allowed, listed = frozenset(given["in"]), ", ".join(named(v) for v in given["in"])
        found.append(lambda n: None if n in allowed else ("enum.in", f"must be one of {listed}, not {named(n)}"))
    if "not_in" in given:
        refused = frozenset(given["not_in"])
        found.append(lambda n: ("enum.not_in", f"must not be {named(n)}") if n in refused else None)
    if given.get("defined_only"):  # after the others, as protovalidate checks it
        found.append(lambda n: None if n in values else ("enum.defined_only", f"unknown value {n}"))
    return found


_NUMBER_RULES = ("const", "lt", "lte", "gt", "gte", "in", "not_in", "finite", "example")
_COMPARE = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}
_WORDS = {"gt": "greater than", "gte": "greater than or equal to", "lt": "less than", "lte": "less than or equal to"}


def _number_rules(field: FieldDescriptor, rules: Message, kind: str) -> list[ValueRule]:
    """const, the bounds, in, not_in, finite: protovalidate's order (lt/lte and gt/gte are numbers 2 to 5)."""
    given = _set_rules(field, rules, kind, _NUMBER_RULES)
    found: list[ValueRule] = []
    if "const" in given:
        found.append(_equals(given["const"], f"{kind}.const", f"must equal {given['const']}"))
    lower = next(((name, given[name]) for name in ("gt", "gte") if name in given), None)
    upper = next(((name, given[name]) for name in ("lt", "lte") if name in given), None)
    if lower is not None or upper is not None:
        found.append(_bounds(kind, lower, upper))
    for name in ("in", "not_in"):
        if name in given:
            listed = ", ".join(str(v) for v in given[name])
            found.append(_membership(name, list(given[name]), f"{kind}.{name}", listed))
    if given.get("finite"):
        found.append(lambda v: None if math.isfinite(v) else (f"{kind}.finite", "must be finite"))
    return found


def _bounds(kind: str, lower: tuple[str, Any] | None, upper: tuple[str, Any] | None) -> ValueRule:
    """One rule for gt/gte and lt/lte together, as protovalidate's ids say: a range (gte_lte), or with the
    upper bound below the lower one, everything outside it (gte_lte_exclusive). NaN breaks every bound."""
    if lower is None or upper is None:
        name, limit = lower or upper  # type: ignore[misc]
        compare = _COMPARE[name]
        description = "must not be negative" if (name, limit) == ("gte", 0) else f"must be {_WORDS[name]} {limit}"
        rule_id = f"{kind}.{name}"
        return lambda v: None if compare(v, limit) else (rule_id, description)
    (low_name, low), (high_name, high) = lower, upper
    above, below = _COMPARE[low_name], _COMPARE[high_name]
    if high >= low:
        rule_id = f"{kind}.{low_name}_{high_name}"
        if low_name == "gte" and high_name == "lte":
            description = f"must be between {low} and {high}"
        else:
            description = f"must be {_WORDS[low_name]} {low} and {_WORDS[high_name]} {high}"
        return lambda v: None if above(v, low) and below(v, high) else (rule_id, description)
    rule_id = f"{kind}.{low_name}_{high_name}_exclusive"
    description = f"must be {_WORDS[low_name]} {low} or {_WORDS[high_name]} {high}"
    return lambda v: None if above(v, low) or below(v, high) else (rule_id, description)
