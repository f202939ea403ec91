"""How the CLI shows a turn: readable lines for people, one JSON object per event for scripts."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.markup import escape

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2


def event_json(event: events_pb2.RuntimeEvent) -> str:
    return json.dumps(json_format.MessageToDict(event, preserving_proto_field_name=True), separators=(",", ":"))


def message_json(message: Message) -> str:
    """Any reply (sessions, agents, models) as one JSON line, proto field names."""
    return json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True))


def args_json(struct: Any) -> str:
    return json.dumps(json_format.MessageToDict(struct), separators=(", ", ": "))


def is_paused(event: events_pb2.RuntimeEvent) -> bool:
    return event.HasField("status") and event.status.state == events_pb2.TURN_STATE_PAUSED


def agent_lines(reply: gateway_pb2.ListAgentsResponse) -> list[str]:
    """One line an agent; a tenant's stored agent shows its latest version (`tutor v3`), a built-in none."""
    return [
        f"{escape(a.name + (f' v{a.version}' if a.version else '')):<16} model={escape(a.model or '-')}  "
        f"tools={escape(', '.join(a.tools) or '-')}  {escape(a.description)}"
        for a in reply.agents
    ]


def model_lines(reply: gateway_pb2.ListModelsResponse) -> list[str]:
    return [
        f"{escape(m.id):<28} {escape(m.provider):<10} aliases: {escape(', '.join(m.aliases) or '-')}"
        + ("  (default)" if m.id == reply.default_model else "")
        for m in reply.models
    ]


TODO_MARKS = {
    events_pb2.TODO_STATUS_PENDING: "[ ]",
    events_pb2.TODO_STATUS_IN_PROGRESS: "[~]",
    events_pb2.TODO_STATUS_COMPLETED: "[x]",
}
DECIDED = {
    events_pb2.APPROVAL_DECISION_APPROVE: ("green", "approved"),
    events_pb2.APPROVAL_DECISION_EDIT: ("yellow", "approved with edits"),
    events_pb2.APPROVAL_DECISION_REJECT: ("red", "rejected"),
}


def decided_line(decided: events_pb2.ApprovalDecided, who: str = "") -> str:
    """A human's decision: what, on which call, by whom, and why."""
    colour, verb = DECIDED.get(decided.decision, ("yellow", "decided"))
    by = f" by {escape(decided.principal)}" if decided.principal else ""
    line = f"{who}[{colour}]✔ {verb}[/{colour}] [cyan]{escape(decided.action_name)}[/cyan]{by}"
    if decided.HasField("edited_arguments"):
        line += f" with {escape(args_json(decided.edited_arguments))}"
    if decided.comment:
        line += f": {escape(decided.comment)}"
    return line


def _enum_name(enum: Any, value: int, prefix: str) -> str:
    """`ERROR_KIND_CANCELLED` -> "cancelled"; a value newer than these stubs shows as its number."""
    try:
        return str(enum.Name(value)).removeprefix(prefix).lower()
    except ValueError:
        return str(value)


class EventPrinter:
    """Prints events as they stream; deltas continue the current line."""

    def __init__(self, console: Console, as_json: bool):
        self.console, self.as_json = console, as_json
        self._mid_line = False
        self._streamed: set[str] = set()  # turns whose text came as deltas

    @property
    def mid_line(self) -> bool:
        return self._mid_line

    def _line(self, text: str) -> None:
        self.end_line()
        self.console.print(text, highlight=False)

    def end_line(self) -> None:
        """Finish a line of streamed deltas before printing anything else."""
        if self._mid_line:
            self.console.print()
            self._mid_line = False

    def show(self, event: events_pb2.RuntimeEvent) -> None:
        if self.as_json:
            self.console.print(event_json(event), markup=False, highlight=False, soft_wrap=True)
            return
        kind = event.WhichOneof("payload")
        # A subagent's events are marked with its name so they don't read as the session agent's.
        who = f"[magenta]{escape(event.agent)}[/magenta] " if event.agent else ""
        if kind == "assistant_delta":
            if who and not self._mid_line:
                self.console.print(who, end="", highlight=False)
            self.console.print(escape(event.assistant_delta.text), end="", highlight=False)
            self._mid_line = True
            self._streamed.add(event.turn_id)
        elif kind == "status":
            status = event.status
            if status.state == events_pb2.TURN_STATE_PAUSED:
                self._line(f"[yellow]⏸ {who}{escape(status.text or 'paused')}[/yellow]")
            else:
                self._line(f"[dim]· {who}{escape(status.text)}[/dim]")
        elif kind == "tool_call_started":
            call = event.tool_call_started
            self._line(f"{who}[cyan]→ {escape(call.name)}[/cyan] {escape(args_json(call.arguments))}")
        elif kind == "tool_call_finished":
            done = event.tool_call_finished
            mark = "[green]←[/green]" if done.ok else "[red]✗[/red]"
            self._line(f"{who}{mark} {escape(done.name)}: {escape(done.result_summary)}")
        elif kind == "approval_required":
            ask = event.approval_required
            why = f" — {escape(ask.description)}" if ask.description else ""
            self._line(
                f"[yellow]? approval needed:[/yellow] {who}[cyan]{escape(ask.action_name)}[/cyan] "
                f"{escape(args_json(ask.arguments))}{why}"
            )
            if ask.prompt:
                self._line(f"[yellow]  {escape(ask.prompt)}[/yellow]")
            if ask.defaults.fields:
                self._line(f"[dim]  suggested: {escape(args_json(ask.defaults))}[/dim]")
        elif kind == "approval_decided":
            self._line(decided_line(event.approval_decided, who))
        elif kind == "handoff":
            h = event.handoff
            why = f": {escape(h.reason)}" if h.reason else ""
            self._line(f"[magenta]⇄ handed over {escape(h.from_agent)} → {escape(h.to_agent)}{why}[/magenta]")
        elif kind == "plan":
            self._line(f"{who}[blue]plan v{event.plan.version}[/blue]")
            for item in event.plan.items:
                mark = TODO_MARKS.get(item.status, "[ ]")
                self._line(f"  {escape(mark)} {escape(item.content)}")
        elif kind == "step_complete":
            step = event.step_complete
            self._line(f"{who}[green]✓ step {step.step_number}/{step.total_steps}:[/green] {escape(step.description)}")
        elif kind == "user_input_requested":
            self._line(f"[yellow]? {who}asks:[/yellow] {escape(event.user_input_requested.prompt)}")
        elif kind == "client_tool_call":
            name = event.client_tool_call.call.name
            self._line(f"{who}[cyan]→ client tool {escape(name)}[/cyan] (the caller runs it)")
        elif kind == "native_notice":
            self._line(f"[yellow]! {who}{escape(event.native_notice.text)}[/yellow]")
        elif kind == "delegation":
            d = event.delegation
            self._line(f"[magenta]⇢ {escape(d.from_agent)} → {escape(d.to_agent)}:[/magenta] {escape(d.task)}")
        elif kind == "rewound":
            r = event.rewound
            dropped = len(r.dropped_turn_ids)
            self._line(
                f"[yellow]↶ {escape(r.reason or 'rewind')}: {dropped} turn{'s' if dropped != 1 else ''} and "
                f"{r.dropped_message_count} messages dropped (events {r.void_after_seq + 1}-{r.void_through_seq} "
                "no longer count)[/yellow]"
            )
        elif kind == "context_compacted":
            c = event.context_compacted
            self._line(f"[dim]· context compacted: summary {c.summary_tokens} tokens[/dim]")
        elif kind == "usage":
            pass  # summed up in the final line
        elif kind == "final":
            if event.final.text and event.turn_id not in self._streamed and not event.agent:
                self._line(escape(event.final.text))  # nothing streamed (a slash command's reply, say)
            self._streamed.discard(event.turn_id)
            m = event.final.metrics
            self._line(
                f"[green]✓[/green] [dim]{m.model_calls} model call(s) · {m.tool_calls} tool call(s) · "
                f"{m.input_tokens}→{m.output_tokens} tokens · ${m.cost_usd:.6f} · {m.duration_ms:.1f} ms · "
                f"seq {event.seq}[/dim]"
            )
        elif kind == "error":
            self._streamed.discard(event.turn_id)
            err = event.error
            retry = " (retryable)" if err.retryable else ""
            kind_name = _enum_name(events_pb2.ErrorKind, err.kind, "ERROR_KIND_")
            self._line(f"[red]✗ {kind_name}{retry}: {escape(err.message)}[/red]")
        else:
            self._line(f"[dim]{kind}: {escape(event_json(event))}[/dim]")
