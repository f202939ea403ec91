// A session's turns as recorded (ListTurns with their steps), oldest first: each turn's question,
// how it ended, its steps (model calls, decisions, tool calls, pauses), and what can be done from
// it: fork after it, fork before it (the fork opens with the question in the composer, to send it
// again edited), or rewind to before it (after a confirm: it and every later turn leave the
// conversation; the live stream's rewound event then drops their events from the page).
import { TurnOutcome, TurnStepKind, type CogmeshClientBase, type Session, type TurnRecord } from "@cogmesh/client/web";
import { h } from "./session.js";
import { formatMs, millis } from "./timeline.js";

export interface TurnsHooks {
  error(err: unknown): void;
  /** A fork was made: open it, with `draft` in the composer when the fork stops before a turn. */
  forked(fork: Session, draft: string | undefined): void;
  /** Ask the user before something that cannot be undone. */
  confirm(question: string): boolean;
}

const PAGE = 200; // ListTurns' largest page

const outcomeName = (outcome: TurnOutcome) =>
  (TurnOutcome[outcome] ?? String(outcome)).toLowerCase().replace("unspecified", "unknown");
const stepName = (kind: TurnStepKind) => (TurnStepKind[kind] ?? String(kind)).toLowerCase();

export class TurnsPanel {
  private loading: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly client: CogmeshClientBase,
    private readonly sessionId: string,
    private readonly container: HTMLElement,
    private readonly hooks: TurnsHooks,
  ) {}

  /** Read the turns again and redraw; calls while one runs are folded into one more read. */
  refresh(): Promise<void> {
    if (this.loading) {
      this.again = true;
      return this.loading;
    }
    this.loading = (async () => {
      do {
        this.again = false;
        try {
          this.draw(await this.read());
        } catch (err) {
          this.hooks.error(err);
        }
      } while (this.again);
      this.loading = undefined;
    })();
    return this.loading;
  }

  private async read(): Promise<TurnRecord[]> {
    const turns: TurnRecord[] = [];
    let pageToken = "";
    do {
      const page = await this.client.listTurns(this.sessionId, { pageSize: PAGE, pageToken, includeSteps: true });
      turns.push(...page.turns);
      pageToken = page.nextPageToken;
    } while (pageToken);
    return turns;
  }

  private draw(turns: TurnRecord[]): void {
    const head = h("div", { class: "turns-head" }, `${turns.length} turn${turns.length === 1 ? "" : "s"}`);
    if (turns.length === 0) {
      this.container.replaceChildren(head, h("p", { class: "gap" }, "No turn yet."));
      return;
    }
    const items = turns.map((turn, i) => this.item(turn, turns.length - i - 1));
    this.container.replaceChildren(head, h("ol", { class: "turn-list" }, ...items));
  }

  private item(turn: TurnRecord, later: number): HTMLLIElement {
    const outcome = outcomeName(turn.outcome);
    const started = millis(turn.startTime);
    const took = turn.endTime && started ? ` · ${formatMs(millis(turn.endTime) - started)}` : "";
    const when = started ? new Date(started).toLocaleTimeString() : "";
    const steps = turn.steps.map((step) =>
      h(
        "li",
        { "data-step": stepName(step.kind), "data-seq": step.seq.toString() },
        h("span", { class: "kind" }, stepName(step.kind).replace(/_/g, " ")),
        step.summary ? ` ${step.summary}` : "",
      ),
    );
    const button = (label: string, action: string, run: () => void, title: string) => {
      const b = h("button", { type: "button", "data-action": action, title }, label);
      b.addEventListener("click", run);
      return b;
    };
    const idle = turn.outcome !== TurnOutcome.RUNNING && turn.outcome !== TurnOutcome.PAUSED;
    const actions = h(
      "div",
      { class: "buttons" },
      button(
        "Fork after",
        "fork-after",
        () => this.fork(turn, false),
        "A new session with the conversation up to this turn",
      ),
      button(
        "Fork before",
        "fork-before",
        () => this.fork(turn, true),
        "A new session with the conversation before this turn, to send it again",
      ),
      button(
        "Rewind",
        "rewind",
        () => this.rewind(turn, later),
        "Drop this turn and every later one from this session's conversation",
      ),
    );
    if (!idle) actions.querySelector("[data-action=rewind]")?.setAttribute("disabled", "");
    return h(
      "li",
      { class: "turn-record", "data-turn": turn.turnId, "data-outcome": outcome },
      h(
        "div",
        { class: "turn-record-head" },
        h("span", {}, `#${turn.index}`),
        h("span", { class: "outcome" }, outcome),
        h("span", { class: "meta" }, `${turn.agent} · ${when}${took} · ${turn.messageCount} message(s)`),
      ),
      h("div", { class: "question" }, turn.userMessage || "(no message)"),
      h("details", {}, h("summary", {}, `${turn.steps.length} step(s)`), h("ol", { class: "steps" }, ...steps)),
      actions,
    );
  }

  private fork(turn: TurnRecord, beforeTurn: boolean): void {
    this.client
      .forkSession(this.sessionId, { turnId: turn.turnId, beforeTurn })
      .then(({ session }) => this.hooks.forked(session, beforeTurn ? turn.userMessage : undefined))
      .catch((err: unknown) => this.hooks.error(err));
  }

  private rewind(turn: TurnRecord, later: number): void {
    const also = later ? ` and the ${later} turn${later === 1 ? "" : "s"} after it` : "";
    const question = `Rewind this session to before turn #${turn.index}? Turn #${turn.index}${also} will leave the conversation.`;
    if (!this.hooks.confirm(question)) return;
    this.container.querySelectorAll("button").forEach((b) => b.setAttribute("disabled", ""));
    // The page drops the turns' events when the live stream brings the rewound event; the list is read
    // again now (and once more then: refreshes fold into one).
    this.client
      .rewindSession(this.sessionId, turn.turnId)
      .catch((err: unknown) => this.hooks.error(err))
      .finally(() => void this.refresh());
  }
}
