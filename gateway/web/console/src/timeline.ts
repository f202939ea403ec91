// A turn's steps drawn as a picture: model calls, tool calls and waits (queued, approvals,
// questions, client tools) on three rows, placed by the events' create_time.
import type { RuntimeEvent, Timestamp } from "@cogmesh/client/web";
import { TurnState } from "@cogmesh/client/web";

export type Row = "model" | "tool" | "wait";

export interface Span {
  row: Row;
  start: number; // ms since the epoch
  end: number;
  label: string;
  open: boolean; // still running when drawn
}

const ROWS: Row[] = ["model", "tool", "wait"];
const SVG_NS = "http://www.w3.org/2000/svg";

export function millis(time: Timestamp | undefined): number {
  return time ? Number(time.seconds) * 1000 + time.nanos / 1e6 : 0;
}

/**
 * The spans of one turn's events. A model call runs from the turn's start (status running), or the
 * end of the tool calls it waited for, to its usage report; a tool call from tool_call_started to
 * tool_call_finished; a wait from the request (or queueing) to the turn running again.
 */
export function spans(events: RuntimeEvent[], now: number): Span[] {
  const out: Span[] = [];
  const tools = new Map<string, { start: number; name: string }>();
  let model: number | undefined;
  let wait: { start: number; label: string } | undefined;
  const closeWait = (t: number) => {
    if (wait) out.push({ row: "wait", start: wait.start, end: t, label: wait.label, open: false });
    wait = undefined;
  };
  let last = 0;
  for (const event of events) {
    const t = millis(event.createTime);
    last = t;
    const p = event.payload;
    switch (p.case) {
      case "status":
        if (p.value.state === TurnState.QUEUED) wait = { start: t, label: "queued" };
        if (p.value.state === TurnState.RUNNING) {
          closeWait(t);
          if (tools.size === 0) model ??= t;
        }
        break;
      case "usage":
        if (model !== undefined) out.push({ row: "model", start: model, end: t, label: p.value.model, open: false });
        model = undefined;
        break;
      case "toolCallStarted":
        tools.set(p.value.correlationId || p.value.name, { start: t, name: p.value.name });
        break;
      case "toolCallFinished": {
        const id = p.value.correlationId || p.value.name;
        const started = tools.get(id);
        if (started) out.push({ row: "tool", start: started.start, end: t, label: started.name, open: false });
        tools.delete(id);
        if (tools.size === 0) model = t;
        break;
      }
      case "approvalRequired":
        wait = { start: t, label: `approval of ${p.value.actionName}` };
        break;
      case "userInputRequested":
        wait = { start: t, label: "question to the user" };
        break;
      case "clientToolCall":
        wait = { start: t, label: `client tool ${p.value.call?.name ?? ""}` };
        break;
      case "final":
      case "error":
        closeWait(t);
        for (const tool of tools.values())
          out.push({ row: "tool", start: tool.start, end: t, label: tool.name, open: false });
        tools.clear();
        model = undefined;
        break;
    }
  }
  const end = Math.max(now, last);
  if (model !== undefined) out.push({ row: "model", start: model, end, label: "model call", open: true });
  for (const tool of tools.values()) out.push({ row: "tool", start: tool.start, end, label: tool.name, open: true });
  if (wait) out.push({ row: "wait", start: wait.start, end, label: wait.label, open: true });
  return out;
}

function svg(tag: string, attrs: Record<string, string | number>, text?: string): SVGElement {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

export function formatMs(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`;
}

/** The turn's timeline as an SVG: one row per kind of step, a bar per step (hover for its length). */
export function drawTimeline(events: RuntimeEvent[], live: boolean): SVGElement {
  const first = millis(events[0]?.createTime);
  const lastEvent = millis(events[events.length - 1]?.createTime);
  const all = spans(events, live ? Date.now() : lastEvent);
  const end = Math.max(lastEvent, ...all.map((s) => s.end));
  const total = Math.max(end - first, 1);
  const width = 640,
    label = 44,
    rowHeight = 16,
    top = 4;
  const height = top + ROWS.length * rowHeight + 14;
  const x = (t: number) => label + ((t - first) / total) * (width - label - 4);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "turn timeline" });
  ROWS.forEach((row, i) => root.append(svg("text", { x: 0, y: top + i * rowHeight + 11 }, row)));
  for (const span of all) {
    const y = top + ROWS.indexOf(span.row) * rowHeight + 2;
    const rect = svg("rect", {
      class: span.row,
      x: x(span.start),
      y,
      width: Math.max(x(span.end) - x(span.start), 1.5),
      height: rowHeight - 4,
      rx: 2,
      "data-row": span.row,
    });
    rect.append(svg("title", {}, `${span.label}: ${formatMs(span.end - span.start)}${span.open ? " (running)" : ""}`));
    root.append(rect);
  }
  const axis = top + ROWS.length * rowHeight + 10;
  root.append(svg("text", { x: label, y: axis }, "0"));
  root.append(svg("text", { x: width - 4, y: axis, "text-anchor": "end" }, formatMs(total)));
  return root;
}
