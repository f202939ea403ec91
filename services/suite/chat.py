"""Interactive `cogmesh chat`: one session, a prompt loop, live turns, approvals and slash commands.

Lines come from stdin (a terminal or a pipe, so scripts and tests drive it the same way).
A line is a message to the agent, or one of the CLI's slash commands below; any other
/command goes to the agent, whose policy service answers it (/role, /model, /reset...).
When a turn pauses for an approval or a question, the next line answers it.
Ctrl-C cancels the running (or paused) turn; at the prompt it leaves, as does Ctrl-D.
With --json, stdout carries only JSON lines (events, replies, errors) and no prompts.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import grpc
from google.protobuf import json_format, struct_pb2
from rich.console import Console
from rich.markup import escape

from cogmesh.client import GatewayClient, GatewayError
from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from services.suite.render import EventPrinter, agent_lines, args_json, is_paused, message_json, model_lines

T = TypeVar("T")
TURN_TIMEOUT_S = 300.0
FOLLOW_TIMEOUT_S = 30.0  # waiting for a cancelled turn's last event

COMMANDS = {
    "/help": "this list, then the agent's own slash commands",
    "/new [AGENT]": "start a new session (with the same agent, or AGENT)",
    "/session [ID]": "show the current session, or switch to session ID",
    "/agents": "list the agents",
    "/models": "list the models",
    "/cancel": "cancel the session's running or paused turn",
    "/history": "replay the session's events",
    "/quit": "leave (also /exit, Ctrl-D)",
}
QUIT = ("/quit", "/exit")
ASKS = ("approval_required", "user_input_requested", "client_tool_call")  # events a paused turn waits on
APPROVAL_HELP = "answer: a[pprove] · e[dit] [JSON arguments] · r[eject] [reason] · c[ancel] the turn"


def suggested_answer(ask: events_pb2.ApprovalRequired) -> str:
    """The answer an empty line gives: the agent's approval_defaults (`decision`, and `comment` as a
    rejection's reason), or "" when it suggests none."""
    defaults = json_format.MessageToDict(ask.defaults)
    decision = str(defaults.get("decision", "")).strip().lower()
    if decision not in ("approve", "reject"):
        return ""
    comment = str(defaults.get("comment") or defaults.get("reason") or "").strip()
    return f"reject {comment}".strip() if decision == "reject" else "approve"


class Interrupted(Exception):
    """Ctrl-C while waiting for a line."""


_INTERRUPT = object()


class LineReader:
    """Lines from stdin, read on a daemon thread: a blocked read never holds up exit, and Ctrl-C can wake a prompt."""

    def __init__(self, stream: IO[str]):
        self._stream = stream
        self._queue: asyncio.Queue[object] = asyncio.Queue()

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def pump() -> None:
            while True:
                line = self._stream.readline()
                loop.call_soon_threadsafe(self._queue.put_nowait, line or None)
                if not line:
                    return

        threading.Thread(target=pump, name="stdin", daemon=True).start()

    def interrupt(self) -> None:
        self._queue.put_nowait(_INTERRUPT)

    async def read(self) -> str | None:
        """The next line without its newline; None at end of input."""
        item = await self._queue.get()
        if item is _INTERRUPT:
            raise Interrupted
        if item is None:
            self._queue.put_nowait(None)  # stays at end of input for later reads
            return None
        return str(item).rstrip("\r\n")


async def spin(console: Console, text: str, waiting: Awaitable[T], enabled: bool = True) -> T:
    """Await with a spinner, on a terminal only (pipes and --json stay clean)."""
    if not enabled or not console.is_terminal:
        return await waiting
    with console.status(escape(text), spinner="dots"):
        return await waiting


@dataclass
class Outcome:
    """How a turn's stream ended: its last event, and the event that asked for an answer if it paused."""

    turn_id: str
    seq: int
    last: events_pb2.RuntimeEvent | None
    ask: events_pb2.RuntimeEvent | None

    @property
    def paused(self) -> bool:
        return self.last is not None and is_paused(self.last)


class Chat:
    def __init__(
        self,
        client: GatewayClient,
        out: Console,
        err: Console,
        *,
        as_json: bool,
        agent: str,
        model: str,
        reader: LineReader,
        scope: dict[str, str] | None = None,
    ):
        self.client, self.out, self.err = client, out, err
        self.as_json, self.agent, self.model = as_json, agent, model
        self.scope = scope or {}  # of the sessions this chat creates
        self.printer = EventPrinter(out, as_json)
        self.reader = reader
        self.session_id = ""
        self._turn: asyncio.Task[Outcome] | None = None
        self._cancelling = False
        self._cancel_task: asyncio.Task[None] | None = None  # held so the loop does not drop it mid-call
        self._quit = False

    # ------------------------------------------------------------------ output

    def note(self, text: str) -> None:
        """A line for people: stdout normally, stderr with --json so stdout stays parseable."""
        self.printer.end_line()
        (self.err if self.as_json else self.out).print(text, highlight=False)

    def emit(self, item: dict[str, Any]) -> None:
        print(json.dumps(item), flush=True)

    def error(self, exc: GatewayError) -> None:
        if self.as_json:
            self.emit({"error": {"code": exc.code.name, "message": exc.message, "reason": exc.reason}})
            return
        reason = f" ({escape(exc.reason)})" if exc.reason else ""
        self.note(f"[red]error:[/red] {escape(str(exc))}{reason}")
        if exc.reason == "TURN_IN_PROGRESS":
            self.note(f"[dim]/session {escape(self.session_id)} answers a paused turn · /cancel gives it up[/dim]")

    async def prompt(self, label: str) -> str | None:
        if not self.as_json:
            self.printer.end_line()
            self.out.print(f"[bold]{escape(label)}[/bold] ", end="", highlight=False)
            self.out.file.flush()
        line = await self.reader.read()
        if line is not None and not self.as_json and not sys.stdin.isatty():
            self.out.print(escape(line), highlight=False)  # echo piped input so the transcript reads well
        return line

    # ------------------------------------------------------------------ the loop

    async def run(self, session_id: str) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_interrupt)
        try:
            if session_id:
                if await self._switch(session_id) == "eof":
                    return 1
            else:
                await self._new(self.agent)
            if not self.as_json and not self._quit:
                self.note("[dim]/help lists commands · Ctrl-C cancels a turn · Ctrl-D or /quit leaves[/dim]")
            while not self._quit:
                try:
                    line = await self.prompt("you>")
                except Interrupted:
                    return 130
                if line is None:
                    return 0
                line = line.strip()
                if not line:
                    continue
                try:
                    if not await self._command(line):
                        stream = self.client.send_message(self.session_id, line, model=self.model)
                        if await self._converse(stream) == "eof":
                            return 1
                except GatewayError as exc:  # one failed call does not end the conversation
                    self.error(exc)
                except (TypeError, ValueError) as exc:  # the SDK refusing an argument, before any call
                    self.error(GatewayError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)))
            return 0
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    def _on_interrupt(self) -> None:
        if self._turn is None or self._turn.done():
            self.reader.interrupt()  # wakes the prompt now, or the next one: Ctrl-C between turns leaves
        else:
            if self._cancelling:  # a second Ctrl-C: stop waiting for the turn to wind down
                self._turn.cancel()
            else:
                self._cancelling = True
                self.note("[yellow]cancelling the turn… (Ctrl-C again stops watching it)[/yellow]")
                self._cancel_task = asyncio.get_running_loop().create_task(self._cancel_quietly())

    async def _cancel_quietly(self) -> None:
        try:
            await self.client.cancel_turn(self.session_id)
        except GatewayError as exc:
            self.error(exc)

    # ------------------------------------------------------------------ turns

    async def _converse(self, stream: AsyncIterator[events_pb2.RuntimeEvent]) -> str:
        """Watch a turn; whenever it pauses, ask the human and watch the resumed turn. "eof" if input ran out."""
        self._cancelling = False
        return await self._follow_up(await self._watch(stream))

    async def _follow_up(self, outcome: Outcome | None) -> str:
        while outcome is not None and outcome.paused:
            resumed = await self._answer(outcome)
            if resumed is None or isinstance(resumed, str):
                return resumed or "done"
            self._cancelling = False
            try:
                outcome = await self._watch(resumed)
            except GatewayError as exc:
                if exc.code != grpc.StatusCode.INVALID_ARGUMENT:
                    raise
                self.error(exc)  # e.g. edited arguments the tool's schema refuses: ask again
        return "done"

    async def _watch(self, stream: AsyncIterator[events_pb2.RuntimeEvent]) -> Outcome | None:
        """Show a turn's events until it ends or pauses; None when the user stopped watching."""
        self._turn = asyncio.get_running_loop().create_task(self._show(stream))
        try:
            return await self._turn
        except asyncio.CancelledError:
            if not self._turn.cancelled():
                raise  # we ourselves are being cancelled
            self.note("[yellow]stopped watching; follow the turn with: cogmesh watch " + self.session_id + "[/yellow]")
            return None
        finally:
            self._turn = None

    async def _show(self, stream: AsyncIterator[events_pb2.RuntimeEvent]) -> Outcome:
        outcome = Outcome("", 0, None, None)
        waiting = "waiting for the turn to start…"
        try:
            while True:
                event = await spin(
                    self.out, waiting, anext(stream, None), not self.as_json and not self.printer.mid_line
                )
                if event is None:
                    return outcome
                self.printer.show(event)
                outcome.turn_id, outcome.seq, outcome.last = event.turn_id, event.seq, event
                kind = event.WhichOneof("payload")
                if kind in ASKS:
                    outcome.ask = event
                # Long waits get a spinner: a queued turn, a running tool.
                waiting = ""
                if kind == "status" and event.status.state == events_pb2.TURN_STATE_QUEUED:
                    waiting = "waiting for the turn to start…"
                elif kind == "tool_call_started":
                    waiting = f"running {event.tool_call_started.name}…"
                # The turn's stream is over at its end or its pause (stop here whatever the SDK would do next).
                if kind in ("final", "error") or is_paused(event):
                    return outcome
        finally:
            self.printer.end_line()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _answer(self, paused: Outcome) -> AsyncIterator[events_pb2.RuntimeEvent] | str | None:
        """Ask the human about a paused turn: the resumed turn's stream, "eof", or None to leave it."""
        assert paused.last is not None
        ask = paused.ask
        interrupt_id = paused.last.status.interrupt_id
        try:
            if ask is not None and ask.HasField("approval_required"):
                return await self._decide(ask.approval_required, interrupt_id)
            if ask is not None and ask.HasField("user_input_requested"):
                while True:
                    text = await self.prompt("answer>")
                    if text is None or text.strip() in QUIT:
                        return self._left_paused(interrupt_id, text is None)
                    if text.strip():
                        request = gateway_pb2.AnswerInterruptRequest(
                            session_id=self.session_id, interrupt_id=interrupt_id, user_input=text
                        )
                        return self._resume("AnswerInterrupt", request)
        except Interrupted:
            await self._cancel_paused(paused)
            return None
        self.note(
            "[yellow]the turn waits for something this CLI cannot answer (a client tool); /cancel gives it up[/yellow]"
        )
        return None

    async def _decide(
        self, ask: events_pb2.ApprovalRequired, interrupt_id: str
    ) -> AsyncIterator[events_pb2.RuntimeEvent] | str:
        allowed = set(ask.allowed_decisions) or {
            events_pb2.APPROVAL_DECISION_APPROVE,
            events_pb2.APPROVAL_DECISION_EDIT,
            events_pb2.APPROVAL_DECISION_REJECT,
        }
        suggested = suggested_answer(ask)
        if not self.as_json:
            default = f" · Enter: {suggested}" if suggested else ""
            self.note(f"[dim]{escape(APPROVAL_HELP + default)}[/dim]")
        while True:
            line = await self.prompt("approve?>")
            if line is None or line.strip() in QUIT:
                return self._left_paused(interrupt_id, line is None)
            if not line.strip() and suggested:
                line = suggested  # the agent's approval_defaults, pre-filled for the reviewer
            word, _, rest = line.strip().partition(" ")
            word, rest = word.lower(), rest.strip()
            request = gateway_pb2.ResolveApprovalRequest(session_id=self.session_id, interrupt_id=interrupt_id)
            if word in ("a", "approve", "y", "yes"):
                request.decision = events_pb2.APPROVAL_DECISION_APPROVE
            elif word in ("r", "reject", "n", "no"):
                request.decision = events_pb2.APPROVAL_DECISION_REJECT
                if not rest:
                    rest = (await self.prompt("reason>")) or ""
                request.reason = rest.strip()
            elif word in ("e", "edit"):
                request.decision = events_pb2.APPROVAL_DECISION_EDIT
                if not rest:
                    self.note(f"[dim]proposed: {escape(args_json(ask.arguments))}[/dim]")
                    rest = (await self.prompt("arguments (JSON)>")) or ""
                edited = self._json_object(rest)
                if edited is None:
                    continue
                request.edited_arguments.CopyFrom(edited)
            elif word in ("c", "cancel", "/cancel"):
                raise Interrupted
            else:
                self.note(f"[yellow]{escape(repr(line.strip()))} is not an answer; {escape(APPROVAL_HELP)}[/yellow]")
                continue
            if request.decision not in allowed:
                name = events_pb2.ApprovalDecision.Name(request.decision).removeprefix("APPROVAL_DECISION_").lower()
                self.note(f"[yellow]this call cannot be answered with {name}; {escape(APPROVAL_HELP)}[/yellow]")
                continue
            return self._resume("ResolveApproval", request)

    def _json_object(self, text: str) -> struct_pb2.Struct | None:
        """Edited arguments: a JSON object, or None after saying what is wrong with it."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            self.note(f"[yellow]edited arguments are not valid JSON ({escape(str(exc))}); try again[/yellow]")
            return None
        if not isinstance(value, dict):
            self.note(f"[yellow]edited arguments must be a JSON object, got {type(value).__name__}; try again[/yellow]")
            return None
        struct = struct_pb2.Struct()
        struct.update(value)
        return struct

    def _left_paused(self, interrupt_id: str, eof: bool) -> str:
        """Leave without answering: the turn stays paused for anyone to answer later."""
        why = "end of input" if eof else "leaving"
        self.note(f"[yellow]{why}: the turn stays paused (interrupt {escape(interrupt_id)})[/yellow]")
        self._quit = True
        return "eof" if eof else "done"

    def _resume(self, method: str, request: Any) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """The resumed turn's events from ResolveApproval or AnswerInterrupt, through the SDK (auth, resume by seq)."""
        if method == "ResolveApproval":
            edited = (
                json_format.MessageToDict(request.edited_arguments) if request.HasField("edited_arguments") else None
            )
            return self.client.resolve_approval(
                request.session_id,
                request.interrupt_id,
                request.decision,
                edited_arguments=edited,
                reason=request.reason,
                timeout_s=TURN_TIMEOUT_S,
            )
        return self.client.answer_interrupt(
            request.session_id, request.interrupt_id, user_input=request.user_input, timeout_s=TURN_TIMEOUT_S
        )

    async def _cancel_paused(self, paused: Outcome) -> None:
        """Give a paused turn up and show how it ended."""
        self.note("[yellow]cancelling the paused turn…[/yellow]")
        await self.client.cancel_turn(self.session_id, paused.turn_id)

        async def follow() -> None:
            async for event in self.client.subscribe(self.session_id, paused.seq):
                if event.turn_id == paused.turn_id:
                    self.printer.show(event)
                    if event.WhichOneof("payload") in ("final", "error"):
                        return

        try:
            await asyncio.wait_for(follow(), FOLLOW_TIMEOUT_S)
        except TimeoutError:
            self.note("[yellow]the turn has not ended yet; cogmesh watch follows it[/yellow]")

    # ------------------------------------------------------------------ slash commands

    async def _command(self, line: str) -> bool:
        """Run one of the CLI's commands; False when the line goes to the agent."""
        name, _, arg = line.partition(" ")
        name, arg = name.lower(), arg.strip()
        if name in QUIT:
            self._quit = True
        elif name in ("/help", "/?"):
            await self._help()
        elif name == "/new":
            await self._new(arg or self.agent)
        elif name == "/session":
            if arg:
                if await self._switch(arg) == "eof":
                    self._quit = True
            else:
                self._show_session(await self.client.get_session(self.session_id))
        elif name == "/agents":
            agents = await self.client.list_agents()
            self._listing(agents, agent_lines(agents))
        elif name == "/models":
            models = await self.client.list_models()
            self._listing(models, model_lines(models))
        elif name == "/cancel":
            turn_id = await self.client.cancel_turn(self.session_id)
            if self.as_json:
                self.emit({"cancelled": bool(turn_id), "turn_id": turn_id})
            else:
                self.note(f"cancelled turn {escape(turn_id)}" if turn_id else "no turn is running")
        elif name == "/history":
            async for event in self.client.subscribe(self.session_id, 0, stop_when_idle=True):
                self.printer.show(event)
            self.printer.end_line()
        else:
            return False
        return True

    async def _help(self) -> None:
        if self.as_json:
            self.emit({"commands": COMMANDS})
        else:
            width = max(map(len, COMMANDS))
            self.note("[bold]cogmesh chat commands[/bold]")
            for usage, text in COMMANDS.items():
                self.note(f"  {escape(usage):<{width}}  {escape(text)}")
            self.note("[bold]the agent's commands[/bold] [dim](any other /command goes to the agent)[/dim]")
        # The policy service answers /help with the agent's commands: ask it rather than repeat them here.
        await self._converse(self.client.send_message(self.session_id, "/help", model=self.model))

    def _listing(self, reply: Any, lines: list[str]) -> None:
        if self.as_json:
            print(message_json(reply), flush=True)
            return
        for line in lines:
            self.note(line)

    async def _new(self, agent: str) -> None:
        session = await self.client.create_session(agent=agent, scope=self.scope)
        self.agent = session.agent
        self.session_id = session.session_id
        self._show_session(session)

    async def _switch(self, session_id: str) -> str:
        """Continue a session; if its turn waits for an answer, ask for it now. "eof" if input ran out."""
        session = await self.client.get_session(session_id)
        self.session_id, self.agent = session.session_id, session.agent
        self._show_session(session)
        # A paused turn ends the log with its pause, and the session takes no message until it is answered.
        pending = Outcome("", 0, None, None)
        async for event in self.client.subscribe(self.session_id, 0, stop_when_idle=True):
            pending.turn_id, pending.seq, pending.last = event.turn_id, event.seq, event
            if event.WhichOneof("payload") in ASKS:
                pending.ask = event
        if not pending.paused:
            return "done"
        if pending.ask is not None and pending.ask.turn_id == pending.turn_id:
            self.printer.show(pending.ask)
        else:
            pending.ask = None
        assert pending.last is not None
        self.printer.show(pending.last)
        return await self._follow_up(pending)

    def _show_session(self, session: Any) -> None:
        if self.as_json:
            self.emit({"session": json_format.MessageToDict(session, preserving_proto_field_name=True)})
        else:
            busy = f" · turn {escape(session.active_turn_id)} running" if session.active_turn_id else ""
            scope = "".join(f" · {escape(k)}={escape(v)}" for k, v in sorted(session.scope.items()))
            self.note(
                f"[dim]session {escape(session.session_id)} · agent {escape(session.agent)}{scope} · "
                f"{session.message_count} message(s){busy}[/dim]"
            )


async def interactive(
    client: GatewayClient,
    out: Console,
    err: Console,
    *,
    as_json: bool,
    agent: str,
    model: str,
    session_id: str,
    stdin: IO[str] | None = None,
    scope: dict[str, str] | None = None,
) -> int:
    reader = LineReader(stdin or sys.stdin)
    reader.start()
    chat = Chat(client, out, err, as_json=as_json, agent=agent, model=model, reader=reader, scope=scope)
    return await chat.run(session_id)
