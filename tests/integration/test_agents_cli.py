"""`cogmesh agents get | versions | create | update | delete | alias | unalias` and `cogmesh sessions move`
against a real in-process suite (dev mode), through the parser services/suite/cli.py builds them into."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cogmesh.client import GatewayClient
from cogmesh.common.v1 import resources_pb2
from cogmesh.gateway.v1 import gateway_pb2
from services.kit.yaml_config import ConfigError
from services.suite import agents_cli
from services.suite.render import agent_lines
from tests.integration.conftest import running_suite

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEFINITION = """\
# the tutor's first version
model: local
tools:
  - calculator
description: first
system_prompt: You are the tutor.
"""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def address() -> AsyncIterator[str]:
    async with running_suite() as (suite, _):
        yield suite.gateway_address


def cli_parser() -> argparse.ArgumentParser:
    """`cogmesh agents` and `cogmesh sessions` as services/suite/cli.py builds them, with only agents_cli's commands."""
    root = argparse.ArgumentParser(prog="cogmesh")
    root.add_argument("--json", action="store_true")
    root.add_argument("--gateway", default="")
    root.add_argument("--api-key", default="")
    sub = root.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, run: Callable[[argparse.Namespace], Awaitable[int]], parent: Any) -> Any:
        p = parent.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
        p.set_defaults(run=run)
        return p

    def with_gateway(p: Any) -> Any:
        p.add_argument("--gateway", default=argparse.SUPPRESS)
        p.add_argument("--api-key", default=argparse.SUPPRESS)
        return p

    agents = sub.add_parser("agents").add_subparsers(dest="action", required=True)
    agents_cli.register(agents, command, with_gateway)
    sessions = sub.add_parser("sessions").add_subparsers(dest="action", required=True)
    agents_cli.register_sessions(sessions, command, with_gateway)
    return root


async def cli(address: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `cogmesh ...`; its exit code, stdout and stderr."""
    args = cli_parser().parse_args(["--gateway", address, *argv])
    capsys.readouterr()
    code = await args.run(args)
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def replies(text: str) -> list[dict[str, Any]]:
    """The command's JSON lines (the in-process suite's log lines share stdout)."""
    lines = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict) and "level" not in parsed and "service" not in parsed:
                lines.append(parsed)
    return lines


async def test_create_alias_get_versions_and_move(
    address: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first = tmp_path / "tutor.yaml"
    first.write_text(DEFINITION)
    code, out, _ = await cli(address, capsys, "--json", "agents", "create", "cli-tutor", "--file", str(first))
    [created] = replies(out)
    assert code == 0 and (created["name"], created["version"]) == ("cli-tutor", "1")
    assert created["definition"]["description"] == "first"

    second = tmp_path / "tutor.json"  # JSON is read too
    second.write_text(json.dumps({"model": "local", "tools": ["calculator"], "system_prompt": "You are tutor two."}))
    code, out, _ = await cli(
        address, capsys, "agents", "update", "cli-tutor", "--file", str(second), "--expected-version", "1"
    )
    assert code == 0 and "stored cli-tutor v2" in out

    code, out, _ = await cli(address, capsys, "agents", "alias", "cli-tutor", "prod", "1")
    assert code == 0 and "cli-tutor@prod → version 1 (new)" in out

    code, out, _ = await cli(address, capsys, "agents", "get", "cli-tutor@prod")
    assert code == 0
    assert "cli-tutor v1  aliases: prod  by " in out and " UTC" in out  # version, aliases, who, when
    assert "  description: first" in out and "  system_prompt: You are the tutor." in out
    code, out, _ = await cli(address, capsys, "--json", "agents", "get", "cli-tutor")
    assert code == 0 and replies(out)[0]["version"] == "2"

    code, out, _ = await cli(address, capsys, "--json", "agents", "versions", "cli-tutor")
    [listed] = replies(out)
    assert [v["version"] for v in listed["versions"]] == ["2", "1"] and listed["aliases"] == {"prod": "1"}
    code, out, _ = await cli(address, capsys, "agents", "versions", "cli-tutor")
    assert [line.split("  ")[0] for line in out.splitlines() if line.startswith("cli-tutor")] == [
        "cli-tutor v2",
        "cli-tutor v1",
    ]

    async with GatewayClient(address) as client:
        session = await client.create_session(agent="cli-tutor@prod")
        listed_agents = await client.list_agents()
    assert session.agent_version == 1
    assert any(line.startswith("cli-tutor v2 ") for line in agent_lines(listed_agents))
    code, out, _ = await cli(address, capsys, "sessions", "move", session.session_id, "cli-tutor@2")
    assert code == 0 and f"{session.session_id} runs cli-tutor v2" in out
    code, out, _ = await cli(address, capsys, "--json", "sessions", "move", session.session_id, "default")
    assert code == 0 and replies(out)[0]["agent"] == "default" and "agent_version" not in replies(out)[0]

    code, out, _ = await cli(address, capsys, "agents", "unalias", "cli-tutor", "prod")
    assert code == 0 and "pointed at version 1" in out
    code, out, _ = await cli(address, capsys, "--json", "agents", "delete", "cli-tutor")
    assert code == 0 and replies(out) == [{"deleted_versions": "2"}]


async def test_a_bad_definition_file_names_the_field_and_its_line(
    address: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEFINITION + "mode: boss\nlimits:\n  max_iterations: many\n")
    code, out, err = await cli(address, capsys, "agents", "create", "cli-bad", "--file", str(bad))
    assert code == 1
    assert f"error: {bad}:7: mode: " in err, err
    assert f"error: {bad}:9: limits.max_iterations: " in err, err
    code, out, _ = await cli(address, capsys, "--json", "agents", "create", "cli-bad", "--file", str(bad))
    [refused] = replies(out)
    assert code == 1 and refused["error"]["code"] == "INVALID_ARGUMENT"
    assert any(p.startswith(f"{bad}:7: mode: ") for p in refused["error"]["problems"])

    # What cannot be sent at all is refused before any call, located in the file.
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: local\ntools: [calculator\n")
    with pytest.raises(ConfigError, match=rf"{broken}:\d+: YAML syntax error"):
        await cli(address, capsys, "agents", "create", "cli-bad", "--file", str(broken))
    listed = tmp_path / "list.yaml"
    listed.write_text("- model: local\n")
    with pytest.raises(ConfigError, match="expected the definition's fields as a mapping, got list"):
        await cli(address, capsys, "agents", "create", "cli-bad", "--file", str(listed))
    with pytest.raises(ConfigError, match="cannot read"):
        await cli(address, capsys, "agents", "create", "cli-bad", "--file", str(tmp_path / "missing.yaml"))


async def test_agent_lines_show_a_stored_agents_version() -> None:
    reply = gateway_pb2.ListAgentsResponse(
        agents=[resources_pb2.Agent(name="default", model="local"), resources_pb2.Agent(name="tutor", version=3)]
    )
    lines = agent_lines(reply)
    assert lines[0].startswith("default ") and " v0" not in lines[0]
    assert lines[1].startswith("tutor v3 ")


async def test_the_parser_checks_numbers() -> None:
    args = cli_parser().parse_args(["agents", "alias", "tutor", "prod", "3"])
    assert (args.run, args.name, args.alias, args.version) == (agents_cli.cmd_alias, "tutor", "prod", 3)
    for argv in (["agents", "alias", "tutor", "prod", "three"], ["agents", "create", "tutor"]):
        with pytest.raises(SystemExit):
            cli_parser().parse_args(argv)
