"""The kit's compiled field rules (services/kit/validation.py) against the protovalidate package.

For every message type with rules (each request of the tree's protos, and every case of
tests/unit/protos/validation_cases.proto) boundary instances are built from the rules
themselves: each rule's limit and the values just past it, set one field at a time. The
kit's verdict, field paths and rule ids must be the package's, in the same order. Types with
a rule the kit does not compile (CEL, well-known formats...) go to the package itself.
"""

from __future__ import annotations

import importlib
import importlib.resources
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import protovalidate
import pytest
from buf.validate import validate_pb2
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_tools import protoc

from cogmesh.gateway.v1 import gateway_pb2
from services.kit import validation
from services.kit.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[2]
CASES_PROTO = Path(__file__).resolve().parent / "protos" / "validation_cases.proto"
_T = FieldDescriptor
_FIELD: Any = validate_pb2.field
ORACLE = protovalidate.Validator()


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """validation_cases.proto compiled with grpc_tools' protoc (it imports the vendored validate.proto)."""
    out = tmp_path_factory.mktemp("validation_cases")
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    args = ["protoc", f"-I{CASES_PROTO.parent}", f"-I{ROOT / 'protos'}", f"-I{well_known}", f"--python_out={out}"]
    assert protoc.main([*args, CASES_PROTO.name]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("validation_cases_pb2")
    finally:
        sys.path.remove(str(out))


def request_types() -> list[Descriptor]:
    """The request type of every RPC in the tree's protos that has rules (its own or in what it holds), and
    the types with rules that a request holds under `ignore = IGNORE_ALWAYS` (a servicer checks them itself:
    Converse's frames, AppendEventsStream's appends, WatchEvents' adds, the webhook store's subscription)."""
    for path in sorted((ROOT / "clients" / "python" / "cogmesh").glob("*/v1/*_pb2.py")):
        importlib.import_module(".".join(path.relative_to(ROOT / "clients" / "python").with_suffix("").parts))
    pool = descriptor_pool.Default()
    found: dict[str, Descriptor] = {}
    for path in sorted((ROOT / "protos" / "cogmesh").rglob("*.proto")):
        file = pool.FindFileByName(str(path.relative_to(ROOT / "protos")))
        for service in file.services_by_name.values():
            for method in service.methods:
                if validation.plan_of(method.input_type) is not None:
                    found[method.input_type.full_name] = method.input_type
                for field in method.input_type.fields:
                    rules, held = _rules(field), field.message_type
                    ignored = rules is not None and rules.ignore == validate_pb2.IGNORE_ALWAYS
                    if ignored and held is not None and validation.plan_of(held) is not None:
                        found[held.full_name] = held
    return [found[name] for name in sorted(found)]


# --------------------------------------------------------------------------- boundary values


def _rules(field: FieldDescriptor) -> validate_pb2.FieldRules | None:
    options = field.GetOptions()
    return options.Extensions[_FIELD] if options.HasExtension(_FIELD) else None


def _limits(rules: Message) -> list[Any]:
    """Every number a typed rules message holds (bounds, lengths, list members)."""
    found: list[Any] = []
    for rule, value in rules.ListFields():
        if rule.type == _T.TYPE_MESSAGE:
            continue
        found.extend(value if rule.is_repeated else [value])
    return found


def _strings(rules: Message | None) -> list[str]:
    """Strings at each length bound and past it, the rule's own values, and a few that patterns tell apart."""
    values = ["", "a", "ab", "team", "Team", "a b", "-x", "x/y", "a\n", "\n", "a\x01", "é", "{x}", "A_b-9", "😀"]
    if rules is None:
        return values
    numbers = [n for n in _limits(rules) if isinstance(n, int) and not isinstance(n, bool)]
    for n in numbers:
        for size in (n - 1, n, n + 1):
            if 0 <= size <= 300_000:
                values += ["a" * size, "é" * size] if size < 1000 else ["a" * size]  # bytes limits: é is 2
    for rule, value in rules.ListFields():
        if rule.type == _T.TYPE_STRING and not rule.is_repeated and rule.name != "pattern":
            values += [value, value + "z", "x" + value, f"a{value}m"]
        elif rule.type == _T.TYPE_STRING and rule.is_repeated:
            values += list(value)
    return values


def _bytes(rules: Message | None) -> list[bytes]:
    values = [b"", b"\x01", b"\x02", b"\x03", b"\x07", b"\x01\x05\x09", b"\x01\x02\x03\x04\x05"]
    for n in _limits(rules) if rules is not None else []:
        if isinstance(n, int) and not isinstance(n, bool) and n < 1000:
            values += [b"\x01" * size for size in (n - 1, n, n + 1) if size >= 0]
        elif isinstance(n, bytes):
            values.append(n)
    return values


def _integers(field: FieldDescriptor, rules: Message | None) -> list[int]:
    unsigned = field.type in (_T.TYPE_UINT32, _T.TYPE_UINT64, _T.TYPE_FIXED32, _T.TYPE_FIXED64)
    bits = 32 if field.cpp_type in (_T.CPPTYPE_INT32, _T.CPPTYPE_UINT32) else 64
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    values = {0, 1, -1, 2, low, high}
    for n in _limits(rules) if rules is not None else []:
        if isinstance(n, int) and not isinstance(n, bool):
            values |= {n - 1, n, n + 1}
    return sorted(v for v in values if low <= v <= high)


def _floats(rules: Message | None) -> list[float]:
    values = [0.0, -0.5, 0.5, 1.0, -1.0, math.nan, math.inf, -math.inf]
    for n in _limits(rules) if rules is not None else []:
        if isinstance(n, float):
            values += [n - 0.25, n, n + 0.25]
    return values


def _enums(field: FieldDescriptor, rules: Message | None) -> list[int]:
    assert field.enum_type is not None
    known = sorted(field.enum_type.values_by_number)
    values = {*known, known[-1] + 1, -1}
    values |= {n for n in (_limits(rules) if rules is not None else []) if isinstance(n, int)}
    return sorted(values)


def scalars(field: FieldDescriptor, rules: validate_pb2.FieldRules | None) -> list[Any]:
    """Boundary values of one scalar (a field, a list's item, a map's key or value) under its rules."""
    kind = rules.WhichOneof("type") if rules is not None else None
    typed = getattr(rules, kind) if rules is not None and kind is not None else None
    if field.type == _T.TYPE_STRING:
        return _strings(typed)
    if field.type == _T.TYPE_BYTES:
        return _bytes(typed)
    if field.type == _T.TYPE_BOOL:
        return [False, True]
    if field.type == _T.TYPE_ENUM:
        return _enums(field, typed)
    if field.type in (_T.TYPE_FLOAT, _T.TYPE_DOUBLE):
        return _floats(typed)
    return _integers(field, typed)


def _sizes(rules: Message | None) -> list[int]:
    numbers = [n for n in _limits(rules) if isinstance(n, int) and not isinstance(n, bool)] if rules else []
    return sorted({0, 1, 2, *(size for n in numbers for size in (n - 1, n, n + 1) if 0 <= size <= 1100)})


def values_of(field: FieldDescriptor, depth: int) -> Iterator[Any]:
    """What one field is set to, one instance each: boundary scalars, lists and maps of them, nested cases."""
    rules = _rules(field)
    entry = field.message_type if field.message_type is not None and field.message_type.GetOptions().map_entry else None
    if entry is not None:
        key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
        map_rules = rules.map if rules is not None and rules.HasField("map") else None
        keys = scalars(key_field, map_rules.keys if map_rules is not None else None)
        if value_field.message_type is not None:
            nested = list(instances(value_field.message_type, depth - 1)) if _descends(value_field, depth) else []
            values = nested or [message_factory.GetMessageClass(value_field.message_type)()]
        else:
            values = scalars(value_field, map_rules.values if map_rules is not None else None)
        for key in keys:
            yield {key: values[0]}
        for value in values:
            yield {keys[1 % len(keys)]: value}
        for size in _sizes(map_rules):
            yield {keys[i % len(keys)] if i < len(keys) else _unique_key(key_field, i): values[0] for i in range(size)}
        return
    if field.is_repeated:
        list_rules = rules.repeated if rules is not None and rules.HasField("repeated") else None
        if field.message_type is not None:
            items: list[Any] = list(instances(field.message_type, depth - 1)) if _descends(field, depth) else []
            items = items or [message_factory.GetMessageClass(field.message_type)()]
        else:
            items = scalars(field, list_rules.items if list_rules is not None else None)
        for item in items:
            yield [item]
        yield [items[0], items[0]]  # for unique
        for size in _sizes(list_rules):
            yield [items[i % len(items)] for i in range(size)]
        return
    if field.message_type is not None:
        # Only types holding rules get boundary instances (celpy, under the package, also fails on a
        # google.protobuf.Timestamp outside its range).
        if _descends(field, depth):
            yield valid_instance(field.message_type, depth - 1)
            yield from instances(field.message_type, depth - 1)
        else:
            yield message_factory.GetMessageClass(field.message_type)()
        return
    yield from scalars(field, rules)


def _descends(field: FieldDescriptor, depth: int) -> bool:
    """Whether to build instances of a field's message type: one holding rules, above depth 0."""
    nested = field.message_type
    assert nested is not None
    if nested.GetOptions().map_entry:
        nested = nested.fields_by_name["value"].message_type
    return depth > 0 and nested is not None and validation.plan_of(nested) is not None


def _checked(kind: Descriptor, field: FieldDescriptor) -> bool:
    """Whether a field's value can change a verdict: its rules, the rules of what it holds, a oneof's."""
    if _rules(field) is not None or field.containing_oneof is not None:
        return True
    if kind.GetOptions().HasExtension(validation._MESSAGE):  # a message-level oneof may name it
        return True
    return field.message_type is not None and _descends(field, 1)


def _unique_key(key_field: FieldDescriptor, i: int) -> Any:
    if key_field.type == _T.TYPE_STRING:
        return f"k{i}"
    if key_field.type == _T.TYPE_BOOL:
        return bool(i % 2)
    return i


def instances(kind: Descriptor, depth: int = 2) -> Iterator[Message]:
    """The empty message, a valid one, then that valid one with each field set to each boundary value."""
    make = message_factory.GetMessageClass(kind)
    yield make()
    base = valid_instance(kind, depth)
    yield base
    for field in kind.fields:
        if not _checked(kind, field):
            continue  # what it is set to changes no verdict
        for value in values_of(field, depth):
            message = make()
            message.CopyFrom(base)
            message.ClearField(field.name)
            try:
                _set(message, field, value)
            except (ValueError, TypeError):
                continue  # not a value of this field's type (a float out of float32's range...)
            yield message


def _about(path: str, field: FieldDescriptor) -> bool:
    names = [field.name] + ([field.containing_oneof.name] if field.containing_oneof is not None else [])
    return any(path == name or path.startswith((f"{name}.", f"{name}[")) for name in names)


def valid_instance(kind: Descriptor, depth: int = 2) -> Message:
    """An instance keeping every rule: each field left unset or given its first boundary value that keeps them."""
    make = message_factory.GetMessageClass(kind)
    message = make()
    for field in kind.fields:
        if not any(_about(path, field) for path, _ in kit_verdict(message)):
            continue
        for value in values_of(field, depth):
            trial = make()
            trial.CopyFrom(message)
            try:
                _set(trial, field, value)
            except (ValueError, TypeError):
                continue
            if not any(_about(path, field) for path, _ in kit_verdict(trial)):
                message = trial
                break
    return message


def _set(message: Message, field: FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, Message):
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Message):
                target.add().CopyFrom(item)
            else:
                target.append(item)
    elif isinstance(value, Message):
        target.CopyFrom(value)
    else:
        setattr(message, field.name, value)


# --------------------------------------------------------------------------- the verdicts


def package_verdict(message: Message) -> list[tuple[str, str]]:
    return [(validation.field_path(v.proto.field), v.proto.rule_id) for v in ORACLE.collect_violations(message)]


def kit_verdict(message: Message) -> list[tuple[str, str]]:
    return [(v.field, v.rule) for v in validation.violations(message)]


def assert_same_verdicts(kind: Descriptor) -> tuple[int, int]:
    """The kit and the package agree on every boundary instance; (valid, invalid) instance counts."""
    valid = invalid = 0
    for message in instances(kind):
        expected = package_verdict(message)
        assert kit_verdict(message) == expected, f"{kind.full_name}: {message}"
        valid, invalid = (valid + 1, invalid) if not expected else (valid, invalid + 1)
    return valid, invalid


REQUESTS = request_types()


def test_the_tree_has_requests_with_rules() -> None:
    names = {kind.full_name for kind in REQUESTS}
    assert {"cogmesh.gateway.v1.SendMessageRequest", "cogmesh.sessions.v1.CreateSessionRequest"} <= names
    assert len(REQUESTS) > 50


@pytest.mark.parametrize("kind", REQUESTS, ids=lambda kind: kind.full_name)
def test_each_request_type_gets_the_packages_verdicts(kind: Descriptor) -> None:
    valid, invalid = assert_same_verdicts(kind)
    assert valid and invalid, f"{kind.full_name}: boundary instances on both sides of its rules"


def test_each_case_type_gets_the_packages_verdicts(cases: ModuleType) -> None:
    for kind in cases.DESCRIPTOR.message_types_by_name.values():
        if not kind.name.startswith("Bad"):
            assert_same_verdicts(kind)


def test_every_rule_of_the_cases_is_broken_by_some_instance(cases: ModuleType) -> None:
    """The boundary instances reach each rule: every (field, rule) pair the cases declare shows up broken."""
    broken = set()
    for kind in cases.DESCRIPTOR.message_types_by_name.values():
        if kind.name.startswith("Bad"):
            continue
        for message in instances(kind):
            broken |= {(kind.name, rule) for _, rule in kit_verdict(message)}
    for expected in [
        ("Strings", "string.len_bytes"),
        ("Strings", "string.not_contains"),
        ("Bytes", "bytes.not_in"),
        ("Numbers", "int64.gt_lt_exclusive"),
        ("Numbers", "double.gte_lt_exclusive"),
        ("Numbers", "fixed64.gte_lte_exclusive"),
        ("Numbers", "double.finite"),
        ("Enums", "enum.defined_only"),
        ("Enums", "enum.in"),
        ("Lists", "repeated.unique"),
        ("Lists", "repeated.min_items"),
        ("Maps", "map.max_pairs"),
        ("Maps", "map.min_pairs"),
        ("Holder", "required"),
        ("MessageOneof", "message.oneof"),
        ("Celled", "high.above_low"),
        ("Formats", "string.email"),
        ("Stamped", "timestamp.gt"),
    ]:
        assert expected in broken, expected


# --------------------------------------------------------------------------- the fallback and the errors


def test_a_rule_the_kit_does_not_compile_is_checked_by_the_package(
    cases: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = validation._protovalidate()

    class Spy:
        def collect_violations(self, message: Message) -> Any:
            calls.append(message.DESCRIPTOR.name)
            return real.collect_violations(message)

    monkeypatch.setattr(validation, "_validator", Spy())
    monkeypatch.setattr(validation, "_plans", {})
    monkeypatch.setattr(validation, "_holds", {})
    celled = cases.Celled(id="abcdef", high=-1)
    assert kit_verdict(celled) == [("id", "string.max_len"), ("high", "high.above_low")]
    assert "Celled" in calls
    # A type the kit compiles hands the nested CEL type to the package, paths under its field.
    calls.clear()
    holder = cases.Holder(leaf=cases.Leaf(name="x"), text="a", celled=celled)
    assert kit_verdict(holder) == [("celled.id", "string.max_len"), ("celled.high", "high.above_low")]
    assert calls == ["Celled"]
    calls.clear()
    assert kit_verdict(cases.Leaf(name="x")) == []
    assert calls == []


def test_bad_annotations_are_refused_when_compiled(cases: ModuleType) -> None:
    with pytest.raises(validation.RuleError, match=r"BadTypes.n: string rules on a field of type int32"):
        validation.plan_of(cases.BadTypes.DESCRIPTOR)
    with pytest.raises(validation.RuleError, match=r"not an RE2 pattern"):
        validation.plan_of(cases.BadPattern.DESCRIPTOR)


def test_a_type_without_rules_has_no_plan(cases: ModuleType) -> None:
    assert validation.plan_of(cases.Plain.DESCRIPTOR) is None
    assert validation.violations(cases.Plain(text="anything")) == []


def test_violations_read_well_after_their_path(cases: ModuleType) -> None:
    with pytest.raises(InvalidArgument) as caught:
        validation.check(cases.Strings(id="x" * 9, needed="", several="ab"), prefix="spec.")
    assert caught.value.violations == [
        ("spec.id", "must be at most 8 characters"),
        ("spec.exact", "must be 3 characters"),
        ("spec.utf8", "must be at least 2 bytes (UTF-8)"),
        ("spec.exact_bytes", "must be 2 bytes (UTF-8)"),
        ("spec.key", "does not match regex pattern `^[a-z0-9][a-z0-9_.\\-/]{0,62}$`"),
        ("spec.anywhere", "does not match regex pattern `b+`"),
        ("spec.affixed", "does not start with `a`"),
        ("spec.affixed", "does not end with `z`"),
        ("spec.affixed", "does not contain `m`"),
        ("spec.choice", "must be one of `a`, `b`"),
        ("spec.fixed", "must equal `ok`"),
        ("spec.needed", "is required"),
        ("spec.several", "must be at least 3 characters"),
    ]
    found = validation.violations(cases.Enums(known=7, chosen=3, set=1, many=[1, 0]))
    assert [(v.field, v.description) for v in found] == [
        ("known", "unknown value 7"),
        ("chosen", "must be one of COLOR_RED, COLOR_GREEN, not COLOR_BLUE"),
        ("refused", "must not be COLOR_UNSPECIFIED"),
        ("fixed", "must be COLOR_BLUE"),
        ("many[1]", "must be one of COLOR_RED, COLOR_GREEN, COLOR_BLUE, not COLOR_UNSPECIFIED"),
    ]
    found = validation.violations(cases.Maps(labels={"Team": "x" * 6, "a": "", "b": ""}, numbered={1: ""}))
    assert [(v.field, v.description) for v in found] == [
        ("labels", "must have at most 2 entries, not 3"),
        ('labels["Team"]', "must be at most 5 characters"),
        ('labels["Team"]', "key does not match regex pattern `^[a-z0-9][a-z0-9_.\\-/]{0,62}$`"),
    ]
    found = validation.violations(cases.Numbers(page_size=201, positive=1, fixed=-3, choice=1, ratio=0.5, least=1))
    assert [(v.field, v.description) for v in found] == [
        ("page_size", "must be between 0 and 200"),
        ("yes", "must be true"),
        ("combined", "must equal 4"),
        ("combined", "must be greater than 2"),
        ("combined", "must be one of 4, 5"),
    ]
    assert [v.description for v in validation.violations(cases.Holder(leaf=cases.Leaf(name="a")))] == [
        "is required: one of text or structured"
    ]


@pytest.mark.parametrize(
    ("pattern", "python"),
    [
        ("^[a-z0-9][a-z0-9_.\\-/]{0,62}$", "^[a-z0-9][a-z0-9_.\\-/]{0,62}\\Z"),
        ("^[^\\x00-\\x1f\\x7f/{}]*$", "^[^\\x00-\\x1f\\x7f/{}]*\\Z"),
        ("a$|b", "a\\Z|b"),
        ("\\d+", None),  # ASCII in RE2, Unicode in Python
        ("(?i)x", None),
        ("[]x]", None),
        ("[a&&b]", None),
    ],
)
def test_patterns_run_on_python_re_only_where_both_read_them_alike(pattern: str, python: str | None) -> None:
    assert validation._python_pattern(pattern) == python


# --------------------------------------------------------------------------- the interceptor


class _Details:
    def __init__(self, method: str) -> None:
        self.method, self.invocation_metadata = method, ()


async def _intercepted(method: str, handler: Any) -> Any:
    async def continuation(details: Any) -> Any:
        return handler

    return await validation.ValidationInterceptor().intercept_service(continuation, _Details(method))


async def test_the_interceptor_leaves_a_method_without_rules_alone() -> None:
    handler = grpc.stream_stream_rpc_method_handler(lambda requests, context: requests)
    assert await _intercepted("/cogmesh.gateway.v1.GatewayService/Converse", handler) is handler
    assert await _intercepted("/no.such.Service/Method", handler) is handler


async def test_the_interceptor_checks_a_request_before_the_servicer_runs() -> None:
    ran: list[Message] = []

    async def send_message(request: Message, context: Any) -> Any:
        ran.append(request)
        yield "event"

    handler = grpc.unary_stream_rpc_method_handler(send_message)
    wrapped = await _intercepted("/cogmesh.gateway.v1.GatewayService/SendMessage", handler)
    good = gateway_pb2.SendMessageRequest(session_id="s", content="hi")
    assert [item async for item in wrapped.unary_stream(good, None)] == ["event"]
    with pytest.raises(InvalidArgument) as caught:
        [item async for item in wrapped.unary_stream(gateway_pb2.SendMessageRequest(session_id="s"), None)]
    assert caught.value.violations == [("content", "is required")]
    assert ran == [good]


async def test_each_message_of_a_client_stream_is_checked_as_it_arrives(cases: ModuleType) -> None:
    seen: list[str] = []

    async def upload(requests: Any, context: Any) -> str:
        async for request in requests:
            seen.append(request.name)
        return "done"

    wrapped = validation._checking(grpc.stream_unary_rpc_method_handler(upload))

    async def stream(*names: str) -> Any:
        for name in names:
            yield cases.Leaf(name=name)

    assert await wrapped.stream_unary(stream("a", "b"), None) == "done"
    with pytest.raises(InvalidArgument) as caught:
        await wrapped.stream_unary(stream("c", "toolong", "d"), None)
    assert caught.value.violations == [("name", "must be at most 3 characters")]
    assert seen == ["a", "b", "c"]
