"""How the CLI shows a turn: readable lines for people, one JSON object per event for scripts."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from rich.console import Console
from rich.markup import escape

from cogmesh.common.v1 import events_pb2


def event_json(event: events_pb2.RuntimeEvent) -> str:
    return json.dumps(json_format.MessageToDict(event, preserving_proto_field_name=True), separators=(",", ":"))


def _args(struct: Any) -> str:
    return json.dumps(json_format.MessageToDict(struct), separators=(", ", ": "))


class EventPrinter:
    """Prints events as they stream; deltas continue the current line."""

    def __init__(self, console: Console, as_json: bool):
        self.console, self.as_json = console, as_json
        self._mid_line = False

    def _line(self, text: str) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False
        self.console.print(text, highlight=False)

    def show(self, event: events_pb2.RuntimeEvent) -> None:
        if self.as_json:
            self.console.print(event_json(event), markup=False, highlight=False, soft_wrap=True)
            return
        kind = event.WhichOneof("payload")
        if kind == "assistant_delta":
            self.console.print(escape(event.assistant_delta.text), end="", highlight=False)
            self._mid_line = True
        elif kind == "status":
            self._line(f"[dim]· {escape(event.status.text)}[/dim]")
        elif kind == "tool_call_started":
            call = event.tool_call_started
            self._line(f"[cyan]→ {escape(call.name)}[/cyan] {escape(_args(call.arguments))}")
        elif kind == "tool_call_finished":
            done = event.tool_call_finished
            mark = "[green]←[/green]" if done.ok else "[red]✗[/red]"
            self._line(f"{mark} {escape(done.name)}: {escape(done.result_summary)}")
        elif kind == "usage":
            pass  # summed up in the final line
        elif kind == "final":
            m = event.final.metrics
            self._line(
                f"[green]✓[/green] [dim]{m.model_calls} model call(s) · {m.tool_calls} tool call(s) · "
                f"{m.input_tokens}→{m.output_tokens} tokens · ${m.cost_usd:.6f} · {m.duration_ms:.1f} ms · "
                f"seq {event.seq}[/dim]"
            )
        elif kind == "error":
            err = event.error
            retry = " (retryable)" if err.retryable else ""
            kind_name = events_pb2.ErrorKind.Name(err.kind).removeprefix("ERROR_KIND_").lower()
            self._line(f"[red]✗ {kind_name}{retry}: {escape(err.message)}[/red]")
        else:
            self._line(f"[dim]{kind}: {escape(event_json(event))}[/dim]")
