"""The public API stands alone: gateway.proto (and the rest of what clients get) imports no
internal proto, every client ships only the public protos' code, and the types the gateway
used to borrow from the services' protos have public twins of the same wire and JSON shape,
so an old client's messages still decode."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from google.protobuf import descriptor, json_format

from cogmesh.common.v1 import events_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.runtime.v1 import runtime_pb2
from gateway import contract
from services.kit.protos import dict_to_struct

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


generate = load(ROOT / "protos" / "generate.py", "protos_generate")


def shape(kind: descriptor.Descriptor | descriptor.EnumDescriptor) -> object:
    """What the wire and JSON see of a message or enum: names, numbers, types (by JSON-visible shape)."""
    if isinstance(kind, descriptor.EnumDescriptor):
        return sorted((v.name, v.number) for v in kind.values)
    internal_name = {public.full_name: internal.full_name for public, internal in contract.TWINS}
    fields = []
    for f in kind.fields:
        of = f.message_type.full_name if f.message_type else f.enum_type.full_name if f.enum_type else None
        of = internal_name.get(of or "", of)  # a twin's field of a twin type (CostBudget.action)
        fields.append((f.name, f.json_name, f.number, f.type, f.is_repeated, of))
    return sorted(fields)


@pytest.mark.parametrize("public, internal", contract.TWINS, ids=lambda d: d.full_name)
def test_each_public_twin_has_its_internal_types_shape(
    public: descriptor.Descriptor, internal: descriptor.Descriptor
) -> None:
    assert public.full_name.startswith("cogmesh.common.v1.")
    assert shape(public) == shape(internal)


def test_the_gateway_api_depends_on_public_protos_only() -> None:
    seen: set[str] = set()
    pending = [gateway_pb2.DESCRIPTOR]
    while pending:
        file = pending.pop()
        if file.name not in seen:
            seen.add(file.name)
            pending.extend(file.dependencies)
    cogmesh = sorted(name for name in seen if name.startswith("cogmesh/"))
    assert cogmesh and all(generate.is_public(name) for name in cogmesh), cogmesh
    assert generate.public_problems() == []


def test_an_old_clients_bytes_and_json_read_the_same_in_the_new_messages() -> None:
    # What an old client sent: the internal types inside the public request, field for field.
    old = {
        "limits": runtime_pb2.TurnLimits(max_iterations=3, max_wall_clock_ms=9000),
        "cost_budget": runtime_pb2.CostBudget(max_total_tokens=5, action=runtime_pb2.BUDGET_ACTION_WARN),
        "approval": runtime_pb2.ApprovalAnswer(
            decision=events_pb2.APPROVAL_DECISION_EDIT, edited_arguments=dict_to_struct({"x": 1}), reason="r"
        ),
        "tool_result": runtime_pb2.ClientToolResult(content="done", is_error=True),
    }
    send = gateway_pb2.SendMessageRequest()
    send.MergeFromString(
        b"".join(
            [
                gateway_pb2.SendMessageRequest(session_id="s", content="hi", multitask_strategy=2).SerializeToString(),
                b"\x3a" + bytes([len(old["limits"].SerializeToString())]) + old["limits"].SerializeToString(),
                b"\x42" + bytes([len(old["cost_budget"].SerializeToString())]) + old["cost_budget"].SerializeToString(),
            ]
        )
    )
    assert send.limits == turns_pb2.TurnLimits(max_iterations=3, max_wall_clock_ms=9000)
    assert send.cost_budget.action == turns_pb2.BUDGET_ACTION_WARN and send.cost_budget.max_total_tokens == 5
    assert send.multitask_strategy == turns_pb2.MULTITASK_STRATEGY_ENQUEUE
    twins = {
        "limits": turns_pb2.TurnLimits,
        "cost_budget": turns_pb2.CostBudget,
        "approval": turns_pb2.ApprovalAnswer,
        "tool_result": turns_pb2.ClientToolResult,
    }
    for name, message in old.items():
        public = contract.internal(message, twins[name])
        assert json_format.MessageToDict(public) == json_format.MessageToDict(message), name
        assert contract.internal(public, type(message)) == message, name


def test_the_gateway_maps_the_strategy_by_name() -> None:
    assert contract.strategy(turns_pb2.MULTITASK_STRATEGY_UNSPECIFIED) == runtime_strategy("REJECT")
    for name in ("REJECT", "ENQUEUE", "INTERRUPT"):
        assert contract.strategy(turns_pb2.MultitaskStrategy.Value(f"MULTITASK_STRATEGY_{name}")) == runtime_strategy(
            name
        )


def runtime_strategy(name: str) -> int:
    from cogmesh.sessions.v1 import sessions_pb2

    return sessions_pb2.MultitaskStrategy.Value(f"MULTITASK_STRATEGY_{name}")


def generated_modules() -> list[str]:
    """Every generated Python module of the tree, as cogmesh/<area>/v1/<name> without suffix."""
    tree = ROOT / "clients" / "python"
    return sorted(
        str(p.relative_to(tree).with_suffix(""))
        for p in (tree / "cogmesh").glob("*/v1/*.py")
        if p.name != "__init__.py"
    )


def test_the_python_wheel_keeps_exactly_the_public_protos_stubs() -> None:
    shipped = load(ROOT / "clients" / "python" / "setup.py", "client_setup").shipped
    public = {name.removesuffix(".proto") for name in generate.public_proto_files()}
    for module in generated_modules():
        base = module.removesuffix("_grpc").removesuffix("_pb2").removesuffix("_connect")
        assert shipped(f"{module}.py") == (base in public), module
        assert shipped(f"{module}.pyi") == (base in public), module
    # The vendored rules the public protos import (buf.validate) go with them.
    for name in generate.VENDORED_PROTOS:
        assert shipped(name.removesuffix(".proto") + "_pb2.py"), name


def test_go_and_typescript_carry_only_the_public_protos() -> None:
    """And the vendored protos they import (buf/validate: the field rules)."""
    public = {name.removesuffix(".proto") for name in generate.public_proto_files() + generate.VENDORED_PROTOS}
    go = ROOT / "clients" / "go" / "gen"
    have_go = {str(p.relative_to(go)).removesuffix("_grpc.pb.go").removesuffix(".pb.go") for p in go.rglob("*.go")}
    assert have_go == public
    ts = ROOT / "clients" / "node" / "src" / "gen"
    have_ts = {
        str(p.relative_to(ts)).removesuffix("_pb.ts")
        for p in ts.rglob("*.ts")
        if p.relative_to(ts).parts[0] != "google"
    }
    assert have_ts == public


def test_every_list_of_the_public_protos_names_the_same_files() -> None:
    """buf.yaml (FILE rules, internal files ignored), tools/buf_breaking.sh (WIRE rules, public
    files ignored) and clients/node/buf.gen.yaml (TypeScript) each list the public protos."""
    every = set(generate.proto_files())
    public = set(generate.public_proto_files())

    def covered(paths: list[str]) -> set[str]:
        return {name for name in every if any(f"protos/{name}".startswith(p.rstrip("/")) for p in paths)}

    config = yaml.safe_load((ROOT / "buf.yaml").read_text())
    assert config["breaking"]["use"] == ["FILE"]
    assert covered(config["breaking"]["ignore"]) == every - public, "buf.yaml ignores exactly the internal protos"
    script = (ROOT / "tools" / "buf_breaking.sh").read_text()
    (line,) = [line for line in script.splitlines() if line.startswith("public=")]
    assert covered(re.findall(r'"([^"]+)"', line)) == public, "the WIRE pass ignores exactly the public protos"
    assert '\\"use\\": [\\"WIRE\\"]' in script
    node = yaml.safe_load((ROOT / "clients" / "node" / "buf.gen.yaml").read_text())
    (protos,) = [i for i in node["inputs"] if i["directory"] == "../../protos"]
    assert covered([p.removeprefix("../../") for p in protos["paths"]]) == public
