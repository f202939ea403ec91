"""`cogmesh agents get | versions | create | update | delete | alias | unalias` and `cogmesh sessions move`.

    cogmesh agents get REF                               a version: "name", "name@7" or "name@prod"
    cogmesh agents versions NAME                         its versions, newest first, and its aliases
    cogmesh agents create NAME --file DEF.yaml           version 1 from a definition file (YAML or JSON)
    cogmesh agents update NAME --file DEF.yaml [--expected-version N]   the next version
    cogmesh agents delete NAME                           every version and alias
    cogmesh agents alias NAME ALIAS VERSION              point ALIAS at VERSION (created or moved)
    cogmesh agents unalias NAME ALIAS                    remove ALIAS
    cogmesh sessions move SESSION AGENT_REF              the session runs AGENT_REF from its next turn on

A definition file holds an agent file's fields without `name` (docs/agent-versions.md); a field
the gateway refuses is named with the file's line, as the suite names a bad agent file.
`register` and `register_sessions` add them to the parser (services/suite/cli.py builds it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format, timestamp_pb2
from rich.console import Console
from rich.markup import escape

from cogmesh.client import GatewayClient, InvalidArgument
from cogmesh.common.v1 import resources_pb2
from cogmesh.gateway.v1 import agents_pb2
from services.kit.config import Settings
from services.kit.yaml_config import ConfigError, YamlDocument, loc_of, parse, read_text
from services.suite.render import message_json

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

Command = Callable[..., Any]  # cli.parser()'s `command(name, help, run, parent)`


def register(agents: Any, command: Command, with_gateway: Callable[[Any], Any]) -> None:
    """Add get, versions, create, update, delete, alias and unalias under `cogmesh agents` (its subparsers)."""
    get = with_gateway(command("get", "show an agent's version (latest, name@7 or name@alias)", cmd_get, agents))
    get.add_argument("ref", metavar="REF", help='"name", "name@7" or "name@prod"')

    versions = with_gateway(command("versions", "list an agent's versions, newest first", cmd_versions, agents))
    versions.add_argument("name", metavar="NAME")

    create = with_gateway(command("create", "store version 1 of a new agent from a file", cmd_create, agents))
    create.add_argument("name", metavar="NAME")
    create.add_argument("--file", required=True, metavar="DEF", help="the definition, YAML or JSON")

    update = with_gateway(command("update", "store an agent's next version from a file", cmd_update, agents))
    update.add_argument("name", metavar="NAME")
    update.add_argument("--file", required=True, metavar="DEF", help="the whole new definition, YAML or JSON")
    update.add_argument(
        "--expected-version",
        type=_count,
        default=0,
        metavar="N",
        help="refuse (ABORTED) unless N is still the latest version",
    )

    delete = with_gateway(command("delete", "delete an agent with every version and alias", cmd_delete, agents))
    delete.add_argument("name", metavar="NAME")

    alias = with_gateway(command("alias", "point an alias at a version (created or moved)", cmd_alias, agents))
    alias.add_argument("name", metavar="NAME")
    alias.add_argument("alias", metavar="ALIAS")
    alias.add_argument("version", type=_count, metavar="VERSION")

    unalias = with_gateway(command("unalias", "remove an alias", cmd_unalias, agents))
    unalias.add_argument("name", metavar="NAME")
    unalias.add_argument("alias", metavar="ALIAS")


def register_sessions(sessions: Any, command: Command, with_gateway: Callable[[Any], Any]) -> None:
    """Add `cogmesh sessions move` (`sessions`: its subparsers)."""
    move = with_gateway(
        command("move", "run a session on another agent or version from its next turn on", cmd_move, sessions)
    )
    move.add_argument("session", help="session id")
    move.add_argument("agent", metavar="AGENT_REF", help='"name", "name@7" or "name@prod"')


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _client(args: argparse.Namespace) -> GatewayClient:
    address = getattr(args, "gateway", "") or Settings().gateway_addr
    return GatewayClient(address, api_key=str(getattr(args, "api_key", "") or os.environ.get("COGMESH_API_KEY", "")))


# ---------------------------------------------------------------------- definition files


def read_definition(path: str) -> YamlDocument:
    """The file parsed (JSON is YAML too), kept to name the line of a field the gateway refuses.
    ConfigError (a ValueError: `cogmesh` prints it) when unreadable, not YAML or not a mapping."""
    document = parse(read_text(Path(path), path), path)
    if not isinstance(document.data, dict):
        got = "nothing" if document.data is None else type(document.data).__name__
        raise ConfigError([document.problem((), f"expected the definition's fields as a mapping, got {got}")])
    return document


def located(document: YamlDocument, refused: InvalidArgument) -> list[str]:
    """The gateway's `definition.<field>` violations as `file:line: field: problem`; others as they came."""
    lines = []
    for field, description in refused.violations:
        if field == "definition" or field.startswith("definition."):
            lines.append(str(document.problem(loc_of(field.removeprefix("definition").lstrip(".")), description)))
        else:
            lines.append(f"{field}: {description}")
    return lines or [refused.message]


def _refused(args: argparse.Namespace, document: YamlDocument, refused: InvalidArgument) -> int:
    problems = located(document, refused)
    if args.json:
        error = {"code": refused.code.name, "message": refused.message, "reason": refused.reason}
        print(json.dumps({"error": error | {"problems": problems}}))
    else:
        for problem in problems:
            err.print(f"error: {problem}", markup=False)
    return 1


# ---------------------------------------------------------------------- how a version reads


def _when(stamp: timestamp_pb2.Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "-"
    return stamp.ToDatetime(tzinfo=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def version_line(agent: agents_pb2.AgentVersion) -> str:
    """`name v3  aliases: prod  by release-bot  2026-11-28 18:55:00 UTC`; a built-in says so."""
    if agent.native:
        return f"{agent.name} v0  built-in (the agents folder, read-only)"
    aliases = ", ".join(agent.aliases) or "-"
    return (
        f"{agent.name} v{agent.version}  aliases: {aliases}  by {agent.created_by or '-'}  {_when(agent.create_time)}"
    )


def definition_lines(agent: agents_pb2.AgentVersion) -> list[str]:
    fields = json_format.MessageToDict(agent.definition)
    text = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return ["  " + line for line in text.rstrip().splitlines()]


def _show(agent: agents_pb2.AgentVersion, verb: str = "") -> None:
    out.print((f"{verb} " if verb else "") + version_line(agent), markup=False)


# ---------------------------------------------------------------------- commands


async def cmd_get(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        agent = await client.get_agent(args.ref)
    if args.json:
        print(message_json(agent))
        return 0
    _show(agent)
    for line in definition_lines(agent):
        out.print(line, markup=False)
    return 0


async def cmd_versions(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        versions = [v async for v in client.list_agent_versions(args.name)]
    aliases = {alias: v.version for v in versions for alias in v.aliases}
    if args.json:
        print(message_json(agents_pb2.ListAgentVersionsResponse(versions=versions, aliases=aliases)))
        return 0
    for version in versions:
        out.print(version_line(version), markup=False)
    if not versions:
        out.print("[dim](no versions)[/dim]")
    return 0


async def cmd_create(args: argparse.Namespace) -> int:
    document = read_definition(args.file)
    async with _client(args) as client:
        try:
            agent = await client.create_agent(args.name, document.data)
        except InvalidArgument as refused:
            return _refused(args, document, refused)
    if args.json:
        print(message_json(agent))
    else:
        _show(agent, "created")
    return 0


async def cmd_update(args: argparse.Namespace) -> int:
    document = read_definition(args.file)
    async with _client(args) as client:
        try:
            agent = await client.update_agent(args.name, document.data, expected_version=args.expected_version)
        except InvalidArgument as refused:
            return _refused(args, document, refused)
    if args.json:
        print(message_json(agent))
    else:
        _show(agent, "stored")
    return 0


async def cmd_delete(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        deleted = await client.delete_agent(args.name)
    if args.json:
        print(message_json(agents_pb2.DeleteAgentResponse(deleted_versions=deleted)))
    else:
        out.print(f"deleted {escape(args.name)}: {deleted} version(s) and its aliases")
    return 0


async def cmd_alias(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        reply = await client.set_agent_alias(args.name, args.alias, args.version)
    if args.json:
        print(message_json(reply))
        return 0
    was = f" (was version {reply.previous_version})" if reply.previous_version else " (new)"
    out.print(f"{args.name}@{args.alias} → version {reply.agent.version}{was}", markup=False)
    _show(reply.agent)
    return 0


async def cmd_unalias(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        previous = await client.delete_agent_alias(args.name, args.alias)
    if args.json:
        print(message_json(agents_pb2.DeleteAgentAliasResponse(previous_version=previous)))
    else:
        out.print(f"removed {args.name}@{args.alias} (it pointed at version {previous})", markup=False)
    return 0


async def cmd_move(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        session = await client.move_session(args.session, args.agent)
    if args.json:
        print(message_json(session))
    else:
        out.print(f"{session.session_id} runs {_agent_of(session)} from its next turn on", markup=False)
    return 0


def _agent_of(session: resources_pb2.Session) -> str:
    return f"{session.agent} v{session.agent_version}" if session.agent_version else f"{session.agent} (built-in)"
