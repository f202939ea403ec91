// One session, live: its events from Subscribe (resumed after a reload from the last seq this tab
// showed), drawn per turn: assistant text as it streams, tool calls with arguments and results,
// approvals and questions to answer, notices, cost, tokens and latency, and the turn's timeline.
// Events are shown only from the Subscribe stream, in seq order; the streams of SendMessage and of
// the answers are read for their errors only, so nothing is shown twice.
import {
  ApprovalDecision,
  CogmeshError,
  ErrorKind,
  TodoStatus,
  TurnState,
  type CogmeshClientBase,
  type EventOf,
  type JsonObject,
  type JsonValue,
  type RuntimeEvent,
} from "@cogmesh/client/web";
import { keep, keepQuestion, keptEvents, lastSeq, question } from "./store.js";
import { drawTimeline, formatMs } from "./timeline.js";

export interface SessionHooks {
  /** Show an error (a failed call or a broken stream). */
  error(err: unknown): void;
  /** A turn started or ended: the page shows or hides its Cancel button. */
  running(turnId: string | undefined): void;
  /** Turns left the conversation (a rewind, or a rollback): the page redraws what lists them. */
  rewound?(event: EventOf<"rewound">): void;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  el.append(...children);
  return el;
}

const json = (value: unknown) => JSON.stringify(value, null, 2);
const DECIDED: Record<number, string> = {
  [ApprovalDecision.APPROVE]: "approved",
  [ApprovalDecision.EDIT]: "approved with edits",
  [ApprovalDecision.REJECT]: "rejected",
};
const TODO_MARKS: Record<number, string> = {
  [TodoStatus.PENDING]: "pending",
  [TodoStatus.IN_PROGRESS]: "in_progress",
  [TodoStatus.COMPLETED]: "completed",
};
const enumName = (names: Record<number, string>, value: number) => (names[value] ?? String(value)).toLowerCase();

/** Read a stream to its end for its errors; its events reach the page through Subscribe. */
async function drain(stream: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of stream);
}

class TurnCard {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly state: HTMLElement;
  private readonly timeline: HTMLElement;
  private readonly events: RuntimeEvent[] = [];
  private assistant: HTMLElement | undefined;
  private plan: HTMLElement | undefined; // the agent's todo list, redrawn in place as it changes
  private readonly asks = new Map<string, HTMLElement>();
  private ended = false;
  private drawPending = false;

  constructor(
    readonly turnId: string,
    private readonly view: SessionView,
  ) {
    this.state = h("span", { class: "state" }, "running");
    this.body = h("div", { class: "turn-body" });
    this.timeline = h("div", { class: "timeline" });
    this.el = h(
      "article",
      { class: "turn", "data-turn": turnId },
      h("div", { class: "turn-head" }, h("span", {}, `turn ${turnId.slice(0, 8)}`), this.state),
      this.body,
      this.timeline,
    );
  }

  /** A step redone by another runtime replica: what it had streamed no longer counts, so hide it. */
  private voidRange(metadata: JsonObject | undefined): void {
    const after = Number(metadata?.void_after_seq);
    const through = Number(metadata?.void_through_seq);
    if (!Number.isFinite(after) || !Number.isFinite(through)) return;
    for (const span of this.el.querySelectorAll<HTMLElement>("[data-kind=assistantDelta]")) {
      const seq = Number(span.dataset.seq);
      if (seq > after && seq <= through) span.classList.add("void");
    }
  }

  /** Show the user's message that started the turn, above what the turn streamed (once). */
  ask(text: string): void {
    if (!this.el.querySelector(".user")) this.body.before(h("div", { class: "user" }, text));
  }

  get live(): boolean {
    return !this.ended;
  }

  add(event: RuntimeEvent): void {
    this.events.push(event);
    const seq = event.seq.toString();
    const line = (cls: string, ...children: (Node | string)[]) => {
      this.assistant = undefined; // text after this line starts a new block
      const el = h(
        "div",
        { class: `line ${cls}`, "data-seq": seq, "data-kind": event.payload.case ?? "" },
        ...children,
      );
      this.body.append(el);
      return el;
    };
    const p = event.payload;
    switch (p.case) {
      case "assistantDelta":
        if (!this.assistant) {
          this.assistant = h("div", { class: "assistant" });
          this.body.append(this.assistant);
        }
        this.assistant.append(h("span", { "data-seq": seq, "data-kind": "assistantDelta" }, p.value.text));
        break;
      case "status":
        if (p.value.content) this.ask(p.value.content); // the accepted status: whoever started the turn
        if (p.value.state === TurnState.RUNNING) this.resolved();
        this.state.textContent = enumName(TurnState, p.value.state);
        line("status", `· ${p.value.text || enumName(TurnState, p.value.state)}`);
        break;
      case "toolCallStarted":
        line(
          "tool",
          "→ ",
          h("span", { class: "name" }, p.value.name),
          p.value.server ? ` (${p.value.server})` : "",
          h("pre", { class: "args" }, json(p.value.arguments ?? {})),
        );
        break;
      case "toolCallFinished": {
        const v = p.value;
        const retries = v.attempts > 1 ? ` · ${v.attempts} attempts` : "";
        line(
          `tool ${v.ok ? "done" : "failed"}`,
          v.ok ? "← " : "✗ ",
          h("span", { class: "name" }, v.name),
          `: ${v.resultSummary}`,
          h("span", { class: "usage" }, ` · ${formatMs(v.durationMs)}${retries}`),
        );
        break;
      }
      case "approvalRequired":
        this.asks.set(p.value.interruptId, line("ask", ...this.approvalForm(event.sessionId, p.value)));
        break;
      case "userInputRequested":
        this.asks.set(
          p.value.interruptId,
          line("ask", ...this.answerForm(p.value.interruptId, p.value.prompt, "userInput")),
        );
        break;
      case "clientToolCall": {
        const call = p.value.call;
        const prompt = `The caller runs the client tool ${call?.name ?? "?"} with ${json(call?.arguments ?? {})}`;
        this.asks.set(p.value.interruptId, line("ask", ...this.answerForm(p.value.interruptId, prompt, "toolResult")));
        break;
      }
      case "usage": {
        const u = p.value;
        line(
          "usage",
          `${u.model} · ${u.inputTokens}→${u.outputTokens} tokens · $${u.costUsd.toFixed(6)} (turn $${u.turnCostUsd.toFixed(6)})`,
        );
        break;
      }
      case "nativeNotice":
        line("notice", `! ${p.value.kind ? `[${p.value.kind}] ` : ""}${p.value.text}`);
        if (p.value.kind === "step_retried") this.voidRange(p.value.metadata);
        break;
      case "contextCompacted":
        line("status", `· context compacted: summary of ${p.value.summaryTokens} tokens`);
        break;
      case "delegation":
        line("status", `⇢ ${p.value.fromAgent} → ${p.value.toAgent}: ${p.value.task}`);
        break;
      case "approvalDecided": {
        const v = p.value;
        line(
          `decided ${enumName(ApprovalDecision, v.decision)}`,
          `✔ ${DECIDED[v.decision] ?? "decided"} `,
          h("span", { class: "name" }, v.actionName),
          v.principal ? ` by ${v.principal}` : "",
          v.editedArguments ? ` with ${JSON.stringify(v.editedArguments)}` : "",
          v.comment ? `: ${v.comment}` : "",
        );
        break;
      }
      case "handoff":
        line(
          "handoff",
          `⇄ handed over ${p.value.fromAgent} → `,
          h("strong", {}, p.value.toAgent),
          p.value.reason ? `: ${p.value.reason}` : "",
        );
        break;
      case "plan": {
        const items = p.value.items.map((item) =>
          h("li", { "data-status": TODO_MARKS[item.status] ?? "pending" }, item.content),
        );
        const drawn = [h("div", { class: "plan-head" }, `plan v${p.value.version}`), h("ol", {}, ...items)];
        if (this.plan) this.plan.replaceChildren(...drawn);
        else this.plan = line("plan", ...drawn);
        this.plan.dataset.version = p.value.version.toString();
        break;
      }
      case "stepComplete":
        line("step", `✓ step ${p.value.stepNumber}/${p.value.totalSteps}: ${p.value.description}`);
        break;
      case "final": {
        const m = p.value.metrics;
        const user = p.value.newMessages.find((message) => message.role === 1 /* ROLE_USER */);
        if (user) this.ask(user.content);
        if (!this.body.querySelector(".assistant") && p.value.text) line("assistant", p.value.text);
        line(
          "final",
          m
            ? `✓ ${m.modelCalls} model call(s) · ${m.toolCalls} tool call(s) · ${m.inputTokens}→${m.outputTokens} tokens · ` +
                `$${m.costUsd.toFixed(6)} · ${formatMs(m.durationMs)}`
            : "✓ done",
        );
        this.end("completed");
        break;
      }
      case "error":
        line(
          "error",
          `✗ ${enumName(ErrorKind, p.value.kind).replace("error_kind_", "")}${p.value.retryable ? " (retryable)" : ""}: ${p.value.message}`,
        );
        // A cancel ends the turn with an error event too, but nothing went wrong.
        this.end(p.value.kind === ErrorKind.CANCELLED ? "cancelled" : "failed");
        break;
      default:
        line("status", `${p.case ?? "unknown event"}`);
    }
    this.scheduleDraw();
  }

  /** Draw the timeline again, once per frame at most (deltas come fast). */
  scheduleDraw(): void {
    if (this.drawPending) return;
    this.drawPending = true;
    requestAnimationFrame(() => {
      this.drawPending = false;
      this.timeline.replaceChildren(drawTimeline(this.events, this.live));
    });
  }

  private end(state: string): void {
    this.ended = true;
    this.state.textContent = state;
    this.resolved();
  }

  // The turn went on (or ended): whatever it asked has been answered.
  private resolved(): void {
    for (const ask of this.asks.values()) {
      ask.classList.add("answered");
      ask.querySelectorAll("button, input, textarea").forEach((el) => el.setAttribute("disabled", ""));
    }
    this.asks.clear();
  }

  private approvalForm(
    sessionId: string,
    ask: {
      actionName: string;
      arguments?: JsonObject;
      allowedDecisions: ApprovalDecision[];
      interruptId: string;
      description: string;
      prompt: string;
      defaults?: JsonObject;
    },
  ): (Node | string)[] {
    const allowed = new Set(
      ask.allowedDecisions.length ? ask.allowedDecisions : [ApprovalDecision.APPROVE, ApprovalDecision.REJECT],
    );
    const buttons = h("div", { class: "buttons" });
    const edited = h("textarea", { rows: "3", "aria-label": "edited arguments" });
    edited.value = json(ask.arguments ?? {});
    const reason = h("input", { placeholder: "reason (optional)", "aria-label": "reason" });
    // The agent's approval_defaults pre-fill the form: the suggested decision is marked, its comment filled in.
    const suggested = typeof ask.defaults?.decision === "string" ? ask.defaults.decision.toLowerCase() : "";
    if (typeof ask.defaults?.comment === "string") reason.value = ask.defaults.comment;
    const decide = (decision: "approve" | "edit" | "reject") => {
      let editedArguments: JsonObject | undefined;
      if (decision === "edit") {
        try {
          editedArguments = JSON.parse(edited.value) as JsonObject;
        } catch (err) {
          this.view.hooks.error(new Error(`edited arguments are not JSON: ${(err as Error).message}`));
          return;
        }
      }
      buttons.querySelectorAll("button").forEach((b) => b.setAttribute("disabled", ""));
      const options = decision === "edit" ? { editedArguments } : decision === "reject" ? { reason: reason.value } : {};
      this.view.answer(this.view.client.resolveApproval(sessionId, ask.interruptId, decision, options));
    };
    const button = (label: string, decision: "approve" | "edit" | "reject", cls = "") => {
      const b = h("button", { type: "button", class: cls, "data-decision": decision }, label);
      if (decision === suggested) b.dataset.suggested = "true";
      b.addEventListener("click", () => decide(decision));
      buttons.append(b);
    };
    if (allowed.has(ApprovalDecision.APPROVE)) button("Approve", "approve", "primary");
    if (allowed.has(ApprovalDecision.EDIT)) button("Run edited", "edit");
    if (allowed.has(ApprovalDecision.REJECT)) {
      button("Reject", "reject");
      buttons.append(reason);
    }
    return [
      h(
        "div",
        {},
        "? approval needed: ",
        h("strong", {}, ask.actionName),
        ask.description ? ` — ${ask.description}` : "",
      ),
      ask.prompt ? h("div", { class: "prompt" }, ask.prompt) : "",
      allowed.has(ApprovalDecision.EDIT) ? edited : h("pre", {}, json(ask.arguments ?? {})),
      buttons,
    ];
  }

  private answerForm(interruptId: string, prompt: string, kind: "userInput" | "toolResult"): (Node | string)[] {
    const input = h("textarea", { rows: "2", "aria-label": "answer" });
    const failed = h("input", { type: "checkbox", "aria-label": "the tool failed" });
    const form = h("form", { class: "buttons" }, input);
    if (kind === "toolResult") form.append(h("label", {}, failed, " failed"));
    form.append(h("button", { type: "submit", class: "primary" }, "Answer"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      form.querySelectorAll("button").forEach((b) => b.setAttribute("disabled", ""));
      const answer =
        kind === "userInput" ? { userInput: input.value } : { toolResult: input.value, isError: failed.checked };
      this.view.answer(this.view.client.answerInterrupt(this.view.sessionId, interruptId, answer));
    });
    return [h("div", {}, `? ${prompt}`), form];
  }
}

export class SessionView {
  private readonly turns = new Map<string, TurnCard>();
  private readonly stop = new AbortController();
  private shown: bigint;

  constructor(
    readonly client: CogmeshClientBase,
    readonly sessionId: string,
    private readonly container: HTMLElement,
    readonly hooks: SessionHooks,
  ) {
    this.shown = 0n;
  }

  /** Show what this tab kept, then follow the session from the last seq shown. */
  start(): void {
    this.container.replaceChildren();
    const kept = keptEvents(this.sessionId);
    const first = kept[0];
    if (first && first.seq > 1n) {
      this.container.append(h("p", { class: "gap" }, `events before seq ${first.seq} are not kept in this tab`));
    }
    for (const event of kept) this.show(event, false);
    this.shown = kept.length ? kept[kept.length - 1]!.seq : lastSeq(this.sessionId);
    void this.follow();
  }

  close(): void {
    this.stop.abort();
  }

  /** Start a turn; its first event names it, so its card can show the question while it runs. */
  send(content: string): void {
    const stream = this.client.sendMessage(this.sessionId, content);
    const named = async () => {
      for await (const event of stream) {
        if (event.turnId && !question(this.sessionId, event.turnId)) {
          keepQuestion(this.sessionId, event.turnId, content);
          this.turns.get(event.turnId)?.ask(content);
        }
      }
    };
    named().catch((err: unknown) => this.hooks.error(err));
  }

  /** Run a turn's stream (send, approval, answer) for its errors; its events come through Subscribe. */
  answer(stream: AsyncIterable<unknown>): void {
    drain(stream).catch((err: unknown) => this.hooks.error(err));
  }

  private async follow(): Promise<void> {
    for (let failures = 0; !this.stop.signal.aborted; failures++) {
      try {
        for await (const event of this.client.subscribe(this.sessionId, {
          afterSeq: this.shown,
          signal: this.stop.signal,
        })) {
          failures = 0;
          this.show(event, true);
        }
      } catch (err) {
        if (this.stop.signal.aborted) return;
        this.hooks.error(err);
        if (err instanceof CogmeshError && !err.resumable) return; // e.g. the session is gone
        // The client already resumed on its own and gave up: wait a little and try again.
        await new Promise((ok) => setTimeout(ok, Math.min(1000 * 2 ** failures, 15_000)));
      }
    }
  }

  /**
   * Turns were dropped (RewindSession, or a ROLLBACK turn's predecessor): their events no longer
   * count, so their cards and anything else shown from the void range leave the page. The log keeps
   * them, and so does this tab: after a reload the kept rewound event drops them again.
   */
  private rewind(event: EventOf<"rewound">): void {
    const { voidAfterSeq, voidThroughSeq, droppedTurnIds, reason, requestedBy } = event.payload.value;
    for (const turnId of droppedTurnIds) {
      this.turns.get(turnId)?.el.remove();
      this.turns.delete(turnId);
    }
    for (const el of this.container.querySelectorAll<HTMLElement>("[data-seq]")) {
      const seq = BigInt(el.dataset.seq ?? "0");
      if (seq > voidAfterSeq && seq <= voidThroughSeq) el.remove();
    }
    const count = droppedTurnIds.length;
    this.container.append(
      h(
        "div",
        { class: "line rewound", "data-seq": event.seq.toString(), "data-kind": "rewound" },
        `⟲ ${reason === "rollback" ? "rolled back" : "rewound"}: ${count} turn${count === 1 ? "" : "s"} dropped`,
        requestedBy ? ` by ${requestedBy}` : "",
        ` (events ${voidAfterSeq + 1n}–${voidThroughSeq} no longer count)`,
      ),
    );
  }

  private show(event: RuntimeEvent, live: boolean): void {
    if (event.seq <= this.shown && live) return; // at-least-once on the wire
    if (event.payload.case === "rewound") {
      this.rewind(event as EventOf<"rewound">);
      if (live) {
        this.shown = event.seq;
        keep(event);
        this.hooks.rewound?.(event as EventOf<"rewound">);
      }
      return;
    }
    let card = this.turns.get(event.turnId);
    if (!card) {
      card = new TurnCard(event.turnId, this);
      this.turns.set(event.turnId, card);
      this.container.append(card.el);
      const asked = question(this.sessionId, event.turnId);
      if (asked !== undefined) card.ask(asked);
    }
    card.add(event);
    if (live) {
      this.shown = event.seq;
      keep(event);
    }
    this.hooks.running(card.live ? event.turnId : undefined);
    this.container.scrollTop = this.container.scrollHeight;
  }
}
