"""`cogmesh sessions turns | messages | fork | rewind`: a session's history, and travelling in it.

    cogmesh sessions turns ID [--steps]                 its turns: what started each, how it ended, its seqs
    cogmesh sessions messages ID [--through TURN]       its conversation, whole or as it was after TURN
    cogmesh sessions fork ID [--turn T] [--before]      a new session with the conversation up to T
    cogmesh sessions fork ID --turn T --edit TEXT       ...up to just before T, then TEXT sent as T again
    cogmesh sessions fork ID --turn T --agent A@2 --replay   ...T's own message sent again, to agent version A@2
    cogmesh sessions rewind ID --turn T                 drop T and every later turn

`register` adds them to the `sessions` command (services/suite/cli.py builds the parser).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from cogmesh.client import GatewayClient
from cogmesh.common.v1 import messages_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2
from services.kit.config import Settings
from services.suite.render import EventPrinter, message_json

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

Command = Callable[..., Any]  # cli.parser()'s `command(name, help, run, parent)`


def register(sessions: Any, command: Command, with_gateway: Callable[[Any], Any]) -> None:
    """Add turns, messages, fork and rewind under `cogmesh sessions` (`sessions`: its subparsers)."""
    turns = with_gateway(command("turns", "list a session's turns, oldest first", cmd_turns, sessions))
    turns.add_argument("session", help="session id")
    turns.add_argument("--steps", action="store_true", help="also each turn's recorded steps")

    messages = with_gateway(command("messages", "read a session's conversation", cmd_messages, sessions))
    messages.add_argument("session", help="session id")
    messages.add_argument("--through", default="", metavar="TURN", help="the conversation as it was after TURN")

    fork = with_gateway(
        command("fork", "a new session with the conversation up to a turn (the original untouched)", cmd_fork, sessions)
    )
    fork.add_argument("session", help="session id")
    fork.add_argument("--turn", default="", metavar="T", help="fork at this turn (default: the last one)")
    fork.add_argument("--before", action="store_true", help="stop before the turn instead of after it")
    fork.add_argument("--agent", default="", help="agent of the fork (default: the original's)")
    fork.add_argument(
        "--label", type=_label_entry, action="append", default=[], metavar="KEY=VALUE", help="labels of the fork"
    )
    fork.add_argument(
        "--edit",
        default=None,
        metavar="TEXT",
        help="fork before the turn (default: the last one) and send TEXT as that turn again on the fork",
    )
    fork.add_argument(
        "--replay",
        action="store_true",
        help="fork before the turn (default: the last one) and send its own message again (with --agent: to another "
        "agent or version, to compare)",
    )
    fork.add_argument("--model", default="", help="with --edit or --replay: model name overriding the agent's model")

    rewind = with_gateway(command("rewind", "drop a turn and every later turn from a session", cmd_rewind, sessions))
    rewind.add_argument("session", help="session id")
    rewind.add_argument("--turn", required=True, metavar="T", help="the first turn to drop")


def _label_entry(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _client(args: argparse.Namespace) -> GatewayClient:
    address = getattr(args, "gateway", "") or Settings().gateway_addr
    return GatewayClient(address, api_key=str(getattr(args, "api_key", "") or os.environ.get("COGMESH_API_KEY", "")))


def _name(enum: Any, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix).lower()
    except ValueError:  # a value newer than these stubs
        return str(value)


def turn_lines(turn: turns_pb2.TurnRecord, steps: bool) -> list[str]:
    outcome = _name(turns_pb2.TurnOutcome, turn.outcome, "TURN_OUTCOME_")
    seqs = f"seq {turn.first_seq}-{turn.last_seq}" if turn.last_seq else "seq -"
    asked = turn.user_message if len(turn.user_message) <= 60 else turn.user_message[:59] + "…"
    lines = [
        f"#{turn.index} {turn.turn_id}  {outcome}  {seqs}  messages={turn.message_count}  agent={turn.agent}  {asked!r}"
    ]
    if steps:
        for step in turn.steps:
            kind = _name(turns_pb2.TurnStepKind, step.kind, "TURN_STEP_KIND_")
            lines.append(f"    seq {step.seq:<6} {kind:<11} {step.summary}")
    return lines


def message_line(message: messages_pb2.Message) -> str:
    role = _name(messages_pb2.Role, message.role, "ROLE_")
    calls = "".join(f" → {call.name}" for call in message.tool_calls)
    tool = f" ({message.name})" if message.name else ""
    return f"[{message.turn_id[:8]}] {role}{tool}: {message.content}{calls}"


async def cmd_turns(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        turns = [turn async for turn in client.list_turns(args.session, include_steps=args.steps)]
    if args.json:
        print(message_json(gateway_pb2.ListTurnsResponse(turns=turns)))
        return 0
    for turn in turns:
        for line in turn_lines(turn, args.steps):
            out.print(line, markup=False)
    if not turns:
        out.print("[dim](no turns)[/dim]")
    return 0


async def cmd_messages(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        messages = [m async for m in client.list_messages(args.session, through_turn_id=args.through)]
    if args.json:
        print(message_json(gateway_pb2.ListMessagesResponse(messages=messages)))
        return 0
    for message in messages:
        out.print(message_line(message), markup=False)
    if not messages:
        out.print("[dim](no messages)[/dim]")
    return 0


async def cmd_fork(args: argparse.Namespace) -> int:
    printer = EventPrinter(out, args.json)
    async with _client(args) as client:
        turn_id, before, text = args.turn, args.before, args.edit
        if args.edit is not None and args.replay:
            err.print("error: give --edit TEXT or --replay, not both", markup=False)
            return 2
        if args.edit is not None or args.replay:
            before = True  # the turn is sent again (edited, or as it was): the fork stops before it
            turns = [turn async for turn in client.list_turns(args.session)]
            chosen = [t for t in turns if t.turn_id == turn_id] if turn_id else turns[-1:]
            if not chosen:
                what = f"no turn {turn_id}" if turn_id else "no turn to send again"
                err.print(f"error: session {args.session} has {what}", markup=False)
                return 1
            turn_id = chosen[0].turn_id
            if args.replay:
                text = chosen[0].user_message
        forked = await client.fork_session(
            args.session, turn_id, before=before, agent=args.agent, labels=dict(args.label)
        )
        if args.json:
            print(message_json(forked), flush=True)
        else:
            origin = forked.session.forked_from  # its turn_id: the last turn the fork holds
            at = f"after turn {origin.turn_id}" if origin.turn_id else "before its first turn"
            out.print(
                f"{escape(forked.session.session_id)}  forked from {escape(origin.session_id)} "
                f"{escape(at)} · {forked.message_count} message(s) · agent {escape(forked.session.agent)}"
            )
        if text is None:
            return 0
        return 0 if await _send(client, forked.session.session_id, text, args.model, printer) else 1


async def _send(client: GatewayClient, session_id: str, text: str, model: str, printer: EventPrinter) -> bool:
    """Run one turn on the fork and stream it as `cogmesh chat` does; True when it answered."""
    from services.suite.cli import run_chat  # cli.py imports this module: read it once both are loaded

    _, ok = await run_chat(client, text, printer, session_id, "", model)
    return ok


async def cmd_rewind(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        reply = await client.rewind_session(args.session, args.turn)
    if args.json:
        print(message_json(reply))
        return 0
    rewound = reply.event.rewound
    out.print(
        f"rewound {escape(args.session)}: dropped {len(rewound.dropped_turn_ids)} turn(s), "
        f"{rewound.dropped_message_count} message(s); events after seq {rewound.void_after_seq} through "
        f"{rewound.void_through_seq} no longer count (logged at seq {reply.event.seq})"
    )
    return 0
