// Typed helpers over RuntimeEvent. An event's payload is a discriminated union:
// switch on `event.payload.case` and TypeScript narrows `event.payload.value`.
import type { RuntimeEvent } from "./gen/cogmesh/common/v1/events_pb.js";
import { ErrorKind, TurnState } from "./gen/cogmesh/common/v1/events_pb.js";

/** The kinds of event: "assistantDelta", "status", "toolCallStarted", ..., "final", "error". */
export type EventKind = NonNullable<RuntimeEvent["payload"]["case"]>;

/** The event with payload case K, with `payload.value` typed accordingly. */
export type EventOf<K extends EventKind> = RuntimeEvent & { payload: Extract<RuntimeEvent["payload"], { case: K }> };

/** True for the last event of a turn: its final answer or its error. */
export function isTerminal(event: RuntimeEvent): boolean {
  return event.payload.case === "final" || event.payload.case === "error";
}

/**
 * True for the status event with which a turn pauses: it waits for an approval,
 * the user's input or a client tool's result (`payload.value.interruptId` names
 * which). The turn's stream ends there; the answer resumes it.
 */
export function isPause(event: RuntimeEvent): event is EventOf<"status"> {
  return event.payload.case === "status" && event.payload.value.state === TurnState.PAUSED;
}

/** The interrupt_id an approval_required, user_input_requested or client_tool_call event asks to answer. */
export function interruptOf(event: RuntimeEvent): string | undefined {
  switch (event.payload.case) {
    case "approvalRequired":
    case "userInputRequested":
    case "clientToolCall":
      return event.payload.value.interruptId;
    default:
      return undefined;
  }
}

/**
 * The seq range (after, through] of events that no longer count, when `event` voids one:
 *
 * - a `rewound` event (RewindSession, or a ROLLBACK turn's predecessor): the dropped turns' events;
 * - a `nativeNotice` of kind "step_retried" (metadata void_after_seq / void_through_seq): the part
 *   of a step that ran again on another runtime replica.
 *
 * Undefined for any other event.
 */
export function voidRange(event: RuntimeEvent): { after: bigint; through: bigint } | undefined {
  const p = event.payload;
  if (p.case === "rewound") return { after: p.value.voidAfterSeq, through: p.value.voidThroughSeq };
  if (p.case !== "nativeNotice" || p.value.kind !== "step_retried") return undefined;
  const metadata = p.value.metadata ?? {};
  const number = (name: string): bigint => BigInt(Math.trunc(Number(metadata[name] ?? 0)));
  return { after: number("void_after_seq"), through: number("void_through_seq") };
}

/**
 * Seqs of events that no longer count: those in the void range of a `rewound` event or of a
 * "step_retried" notice among `events` (see voidRange). A client rebuilding the conversation or
 * drawing assistant deltas skips them.
 */
export function voided(events: readonly RuntimeEvent[]): Set<bigint> {
  const seqs = new Set<bigint>();
  for (const event of events) {
    const range = voidRange(event);
    if (!range) continue;
    for (let seq = range.after + 1n; seq <= range.through; seq++) seqs.add(seq);
  }
  return seqs;
}

/** The events that still count: `events` without those a `rewound` event or a retried step voided. */
export function withoutVoided(events: readonly RuntimeEvent[]): RuntimeEvent[] {
  const void_ = voided(events);
  return events.filter((e) => !void_.has(e.seq));
}

/** The assistant text the events streamed, without the deltas a retried step (or a rewind) voided. */
export function streamedText(events: readonly RuntimeEvent[]): string {
  const void_ = voided(events);
  return events
    .filter((e) => e.payload.case === "assistantDelta" && !void_.has(e.seq))
    .map((e) => (e.payload.case === "assistantDelta" ? e.payload.value.text : ""))
    .join("");
}

/** A completed turn's answer: the final event's text, or the streamed text when the final event left an
 * answer over 512 KiB out (`textOmitted`). */
export function finalText(final: EventOf<"final">["payload"]["value"], events: readonly RuntimeEvent[]): string {
  return final.textOmitted ? streamedText(events) : final.text;
}

/** Narrow an event to one kind: `if (is(event, "final")) event.payload.value.text`. */
export function is<K extends EventKind>(event: RuntimeEvent, kind: K): event is EventOf<K> {
  return event.payload.case === kind;
}

/**
 * A turn ended with an `error` event. Carries what the event said so nothing is lost:
 * the kind ("PROVIDER_ERROR", "CANCELLED", ...), whether a retry may succeed, and the
 * text streamed before the failure.
 */
export class TurnFailedError extends Error {
  override readonly name = "TurnFailedError";
  readonly kind: string;
  readonly retryable: boolean;
  readonly partialText: string;

  constructor(readonly event: EventOf<"error">) {
    const error = event.payload.value;
    const kind = ErrorKind[error.kind] ?? String(error.kind);
    super(`turn ${event.turnId} failed (${kind}): ${error.message}`);
    this.kind = kind;
    this.retryable = error.retryable;
    this.partialText = error.partialText;
  }
}

/** What a paused turn waits for: a human's approval, the user's input, or the result of a client-side tool. */
export type PauseKind = "approval" | "userInput" | "clientTool";

/** The kind of pause the event that asked for an answer stands for; undefined for other events. */
export function pauseKindOf(event: RuntimeEvent | undefined): PauseKind | undefined {
  switch (event?.payload.case) {
    case "approvalRequired":
      return "approval";
    case "userInputRequested":
      return "userInput";
    case "clientToolCall":
      return "clientTool";
    default:
      return undefined;
  }
}

/**
 * A turn paused instead of finishing: it waits for an answer to `interruptId`
 * (an approval, the user's input or a client tool's result). `request` is the
 * event that asked, when the stream carried it. Pass the error itself to
 * `client.approve / edit / reject / answer` to resume the turn.
 */
export class TurnPausedError extends Error {
  override readonly name = "TurnPausedError";
  readonly sessionId: string;
  readonly turnId: string;
  readonly interruptId: string;
  /** What the turn waits for; undefined when the stream did not carry the event that asked. */
  readonly kind: PauseKind | undefined;

  constructor(
    readonly event: EventOf<"status">,
    readonly request: RuntimeEvent | undefined,
  ) {
    super(`turn ${event.turnId} paused, waiting for an answer to ${event.payload.value.interruptId || "an interrupt"}`);
    this.sessionId = event.sessionId;
    this.turnId = event.turnId;
    this.interruptId = event.payload.value.interruptId;
    this.kind = pauseKindOf(request);
  }
}
