// CogmeshClientBase: a small typed wrapper over the generated GatewayService client, over any
// Connect transport: Node's gRPC (client.ts) or a browser's Connect / gRPC-Web (web.ts). No
// Node-only API in here, so the browser bundle can take it as it is.
//
// - Deadlines: every unary call gets `timeoutMs`; streams run until they end or are aborted.
// - Retries: idempotent unary calls are retried on UNAVAILABLE with backoff.
// - Rate limits: a call refused with RESOURCE_EXHAUSTED and a RetryInfo delay waits that
//   delay and tries again (`rateLimitAttempts`, `rateLimitWaitMs`): reads always;
//   createSession and a turn's stream only when refused at admission, before anything
//   started (retry.ts).
// - Resume: when a stream breaks (network, gateway restart, slow-reader cut-off), the
//   client reconnects with Subscribe from the last seq it handed out, so the caller
//   sees every event once and in order.
import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { Code, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";

import { ApprovalDecision, type RuntimeEvent } from "./gen/cogmesh/common/v1/events_pb.js";
import type { Message } from "./gen/cogmesh/common/v1/messages_pb.js";
import type { Agent, Model, Session } from "./gen/cogmesh/common/v1/resources_pb.js";
import { ClientToolResultSchema, MultitaskStrategy, type TurnRecord } from "./gen/cogmesh/common/v1/turns_pb.js";
import { AgentService, type AgentVersion } from "./gen/cogmesh/gateway/v1/agents_pb.js";
import {
  AnswerInterruptRequestSchema,
  GatewayService,
  ResolveApprovalRequestSchema,
  SubscribeRequestSchema,
} from "./gen/cogmesh/gateway/v1/gateway_pb.js";
import { CogmeshError } from "./errors.js";
import { RateLimitWait } from "./retry.js";
import {
  finalText,
  interruptOf,
  is,
  isPause,
  isTerminal,
  TurnFailedError,
  TurnPausedError,
  type EventOf,
  type PauseKind,
} from "./events.js";

/** How the client waits, retries and resumes: the same over every transport. */
export interface CallOptions {
  /** Deadline of each unary call in milliseconds. Default 10 000. */
  timeoutMs?: number;
  /** Attempts of an idempotent unary call while the gateway is UNAVAILABLE. Default 4. */
  maxAttempts?: number;
  /** Reconnections of a broken stream in a row without receiving anything. Default 5. */
  resumeAttempts?: number;
  /** First backoff between attempts in milliseconds (doubles, capped at 2 s). Default 100. */
  backoffMs?: number;
  /**
   * Attempts of a call the gateway refuses over a rate limit (RESOURCE_EXHAUSTED with a RetryInfo
   * delay), waiting the delay in between; 1 never waits. Default 3.
   */
  rateLimitAttempts?: number;
  /** Milliseconds one call may spend waiting out rate limits in all. Default 10 000. */
  rateLimitWaitMs?: number;
}

/** The interceptor that sends `authorization: Bearer <apiKey>` on every call. */
export function bearer(apiKey: string): Interceptor {
  return (next) => async (req) => {
    req.header.set("authorization", `Bearer ${apiKey}`);
    return next(req);
  };
}

export interface CreateSessionOptions {
  /** Agent to talk to; default "default". */
  agent?: string;
  /** Application user id. */
  userId?: string;
  /** Application topic id. */
  topicId?: string;
  /** On whose behalf the session runs (e.g. `{ end_user: "u_42" }`); the API key decides what may be set. */
  scope?: Record<string, string>;
}

export interface StreamOptions {
  /** Abort to stop the stream; the iterator then throws a CANCELED CogmeshError. */
  signal?: AbortSignal;
}

export interface SendOptions extends StreamOptions {
  /** Model name for this turn instead of the agent's. */
  model?: string;
  /**
   * What the turn does while another turn of the session runs: "reject" (the default), "enqueue",
   * "interrupt", or "rollback" (interrupt it, then drop what it added: its messages leave the
   * conversation and a `rewound` event voids its events).
   */
  multitaskStrategy?: Multitask | MultitaskStrategy;
}

/** The multitask strategies by name (SendOptions.multitaskStrategy). */
export type Multitask = "reject" | "enqueue" | "interrupt" | "rollback";

export interface SubscribeOptions extends StreamOptions {
  /** Deliver events with seq greater than this; 0 (default) replays everything retained. */
  afterSeq?: bigint | number;
  /** End once caught up and no turn is running, instead of following the session. */
  stopWhenIdle?: boolean;
  /** Called on each heartbeat the gateway sends while the session is idle. */
  onHeartbeat?: () => void;
}

export interface ListTurnsOptions {
  /** Turns per page, 1..200; 0 or unset: the gateway's default (50). */
  pageSize?: number;
  /** The previous page's nextPageToken; unset for the first page. */
  pageToken?: string;
  /** Also return each turn's recorded steps (model calls, decisions, tool calls, pauses). */
  includeSteps?: boolean;
}

export interface ListMessagesOptions {
  /** Messages per page, 1..1000; 0 or unset: the gateway's default (100). */
  pageSize?: number;
  /** The previous page's nextPageToken; unset for the first page. */
  pageToken?: string;
  /** The conversation as it was after this turn (NOT_FOUND when the session has no such turn). */
  throughTurnId?: string;
}

export interface ForkSessionOptions {
  /** The turn to fork at; unset: after the session's last turn. */
  turnId?: string;
  /** Stop before `turnId` instead of after it, to send that turn again (edited, or to another agent). */
  beforeTurn?: boolean;
  /** Agent of the fork; unset: the original's. */
  agent?: string;
  /** Labels of the fork; unset or empty: the original's. */
  labels?: Record<string, string>;
}

/** What `rewindSession` returns: the session after the rewind and the `rewound` event it logged. */
export interface RewindResult {
  session: Session;
  /** The event logged, with its seq: `payload.value` names the dropped turns and the void seq range. */
  event: EventOf<"rewound">;
}

/** What `listAgentVersions` returns: one page of an agent's versions, newest first, and every alias. */
export interface AgentVersionsPage {
  versions: AgentVersion[];
  /** Every alias of the agent and the version it points at now. */
  aliases: Record<string, bigint>;
  /** Pass back as `pageToken` for the next page; "" on the last. */
  nextPageToken: string;
}

/** Which version `getAgent` reads; unset: the latest (or what a "name@7" / "name@prod" suffix says). */
export interface GetAgentOptions {
  /** A version number. */
  version?: bigint | number;
  /** An alias, e.g. "prod". */
  alias?: string;
}

/** What `listSessions` keeps; every filter is optional. */
export interface ListSessionsOptions {
  pageSize?: number;
  pageToken?: string;
  /** Only the forks of this session. */
  forkedFrom?: string;
  /** Only sessions opened with this agent (by name). */
  agent?: string;
  /** Only sessions on this version of their agent; with `agent`, a version of that agent. */
  agentVersion?: bigint | number;
}

/** What `ask` returns: the turn's answer and every event it produced. */
export interface TurnResult {
  turnId: string;
  /** The final answer. */
  text: string;
  /** The final event's payload: new messages, metrics, model. */
  final: EventOf<"final">["payload"]["value"];
  /** All events of the turn, in seq order. */
  events: RuntimeEvent[];
}

/**
 * The paused turn to answer: the TurnPausedError that `ask` (or `approve`...) threw,
 * or the session and the interrupt_id of its approval_required / user_input_requested /
 * client_tool_call event.
 */
export type Interrupt = TurnPausedError | { sessionId: string; interruptId: string };

/** A human's decision on a tool call waiting for approval. */
export type Decision = "approve" | "edit" | "reject";

export interface ResolveApprovalOptions extends StreamOptions {
  /** With "edit": the arguments to run the call with instead, a JSON object (checked against the tool's schema). */
  editedArguments?: JsonObject;
  /** With "reject": why, given back to the model. */
  reason?: string;
}

/** What answers a user_input_requested or a client_tool_call event: exactly one of the two. */
export type InterruptAnswer = { userInput: string } | { toolResult: string; isError?: boolean };

// Safe to repeat: reads, deletes and cancels. CreateSession and SendMessage are not.
type IdempotentMethod =
  | "getAgent"
  | "listAgentVersions"
  | "setAgentAlias"
  | "moveSession"
  | "getSession"
  | "listSessions"
  | "deleteSession"
  | "cancelTurn"
  | "listAgents"
  | "listModels"
  | "listTurns"
  | "listMessages";

function requireString(name: string, value: unknown, { optional = false } = {}): string {
  if (value === undefined && optional) return "";
  if (typeof value !== "string") {
    throw new TypeError(`${name} must be a string, got ${value === null ? "null" : typeof value}`);
  }
  return value;
}

function requirePageSize(value: unknown): number {
  if (value === undefined) return 0;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`pageSize must be a non-negative integer, got ${String(value)}`);
  }
  return value;
}

function requireLabels(value: unknown): Record<string, string> {
  if (value === undefined) return {};
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(
      `labels must be an object of strings, got ${Array.isArray(value) ? "an array" : describe(value)}`,
    );
  }
  for (const [key, label] of Object.entries(value)) requireString(`labels.${key}`, label);
  return value as Record<string, string>;
}

function toSeq(name: string, value: unknown): bigint {
  if (value === undefined) return 0n;
  if (typeof value === "bigint" && value >= 0n) return value;
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  throw new TypeError(`${name} must be a non-negative integer (number or bigint), got ${String(value)}`);
}

const MULTITASK: Record<Multitask, MultitaskStrategy> = {
  reject: MultitaskStrategy.REJECT,
  enqueue: MultitaskStrategy.ENQUEUE,
  interrupt: MultitaskStrategy.INTERRUPT,
  rollback: MultitaskStrategy.ROLLBACK,
};

/** A multitask strategy by name or enum value; RangeError naming the value otherwise. */
export function toMultitask(value: unknown): MultitaskStrategy {
  if (value === undefined) return MultitaskStrategy.UNSPECIFIED;
  if (typeof value === "string" && Object.hasOwn(MULTITASK, value)) return MULTITASK[value as Multitask];
  if (typeof value === "number" && Object.values(MULTITASK).includes(value)) return value;
  throw new RangeError(
    `multitaskStrategy must be "reject", "enqueue", "interrupt" or "rollback", got ${describe(value)}`,
  );
}

const DECISIONS: Record<Decision, ApprovalDecision> = {
  approve: ApprovalDecision.APPROVE,
  edit: ApprovalDecision.EDIT,
  reject: ApprovalDecision.REJECT,
};

function toDecision(value: unknown): ApprovalDecision {
  if (typeof value === "string" && Object.hasOwn(DECISIONS, value)) return DECISIONS[value as Decision];
  if (typeof value === "number" && Object.values(DECISIONS).includes(value)) return value;
  throw new RangeError(`decision must be "approve", "edit" or "reject", got ${describe(value)}`);
}

function describe(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : value === null ? "null" : typeof value;
}

// Checks what protobuf's Struct can carry, so a bad value is named here rather than failing deep in serialization.
function requireJson(name: string, value: unknown): JsonValue {
  if (value === null || typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number") {
    if (Number.isFinite(value)) return value;
    throw new TypeError(`${name} must be a finite number, got ${value}`);
  }
  if (Array.isArray(value)) return value.map((v, i) => requireJson(`${name}[${i}]`, v));
  if (typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, requireJson(`${name}.${k}`, v)]));
  }
  throw new TypeError(
    `${name} must be JSON (null, string, number, boolean, array or plain object), got ${describe(value)}`,
  );
}

function requireJsonObject(name: string, value: unknown): JsonObject {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`${name} must be a JSON object, got ${Array.isArray(value) ? "an array" : describe(value)}`);
  }
  return requireJson(name, value) as JsonObject;
}

function requireInterrupt(
  method: string,
  interrupt: unknown,
  expected: PauseKind,
): { sessionId: string; interruptId: string } {
  if (typeof interrupt !== "object" || interrupt === null) {
    throw new TypeError(
      `${method}: interrupt must be a TurnPausedError or {sessionId, interruptId}, got ${describe(interrupt)}`,
    );
  }
  const { sessionId, interruptId } = interrupt as Record<string, unknown>;
  if (interrupt instanceof TurnPausedError && interrupt.kind !== undefined && interrupt.kind !== expected) {
    const words: Record<PauseKind, string> = {
      approval: "an approval",
      userInput: "user input",
      clientTool: "a client tool's result",
    };
    throw new TypeError(`${method}: the turn waits for ${words[interrupt.kind]}, not for ${words[expected]}`);
  }
  return { sessionId: requireString("sessionId", sessionId), interruptId: requireString("interruptId", interruptId) };
}

export class CogmeshClientBase {
  /** The generated GatewayService client, for anything this wrapper does not cover. */
  readonly gateway: Client<typeof GatewayService>;
  /** The generated AgentService client: a tenant's agents as versioned resources. */
  readonly agentService: Client<typeof AgentService>;
  private readonly timeoutMs: number;
  private readonly maxAttempts: number;
  private readonly resumeAttempts: number;
  private readonly backoffMs: number;
  private readonly rateLimitAttempts: number;
  private readonly rateLimitWaitMs: number;
  // Aborted by close(): ends every call and stream still open.
  private readonly lifetime = new AbortController();

  /** `release` runs once on close(): the transport's connections, when the client owns them. */
  constructor(
    transport: Transport,
    options: CallOptions = {},
    private readonly release?: () => void,
  ) {
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxAttempts = Math.max(1, options.maxAttempts ?? 4);
    this.resumeAttempts = Math.max(0, options.resumeAttempts ?? 5);
    this.backoffMs = options.backoffMs ?? 100;
    this.rateLimitAttempts = Math.max(1, options.rateLimitAttempts ?? 3);
    this.rateLimitWaitMs = Math.max(0, options.rateLimitWaitMs ?? 10_000);
    this.gateway = createClient(GatewayService, transport);
    this.agentService = createClient(AgentService, transport);
  }

  /** Abort every open call and stream and close the connection. Later calls fail with CANCELED. */
  close(): void {
    if (this.lifetime.signal.aborted) return;
    this.lifetime.abort(new CogmeshError(Code.Canceled, "client is closed"));
    this.release?.();
  }

  get closed(): boolean {
    return this.lifetime.signal.aborted;
  }

  async createSession(options: CreateSessionOptions = {}): Promise<Session> {
    const request = {
      agent: requireString("agent", options.agent, { optional: true }),
      userId: requireString("userId", options.userId, { optional: true }),
      topicId: requireString("topicId", options.topicId, { optional: true }),
      scope: options.scope ?? {},
    };
    const reply = await this.unary(false, (o) => this.gateway.createSession(request, o));
    return reply.session!;
  }

  async getSession(sessionId: string): Promise<Session> {
    const request = { sessionId: requireString("sessionId", sessionId) };
    return (await this.unary("getSession", (o) => this.gateway.getSession(request, o))).session!;
  }

  /**
   * One page of the tenant's sessions, newest first; `forkedFrom` keeps the forks of one session,
   * `agent` and `agentVersion` the sessions on an agent (at a version).
   */
  async listSessions(options: ListSessionsOptions = {}): Promise<{
    sessions: Session[];
    nextPageToken: string;
  }> {
    const pageSize = options.pageSize ?? 0;
    if (!Number.isInteger(pageSize)) throw new TypeError(`pageSize must be an integer, got ${String(pageSize)}`);
    const request = {
      pageSize,
      pageToken: requireString("pageToken", options.pageToken, { optional: true }),
      forkedFrom: requireString("forkedFrom", options.forkedFrom, { optional: true }),
      agent: requireString("agent", options.agent, { optional: true }),
      agentVersion: toSeq("agentVersion", options.agentVersion),
    };
    const reply = await this.unary("listSessions", (o) => this.gateway.listSessions(request, o));
    return { sessions: reply.sessions, nextPageToken: reply.nextPageToken };
  }

  /**
   * Move a session to another agent or version from its next turn on: `agentRef` as createSession
   * takes it ("name", "name@7", "name@prod"), resolved to a version now. A running turn keeps its own.
   */
  async moveSession(sessionId: string, agentRef: string): Promise<Session> {
    const request = {
      sessionId: requireString("sessionId", sessionId),
      agent: requireString("agentRef", agentRef),
      updateMask: { paths: ["agent"] },
    };
    return (await this.unary("moveSession", (o) => this.gateway.updateSession(request, o))).session!;
  }

  /**
   * Store version 1 of a new agent of the tenant. `definition` is an agent file's fields as JSON
   * (without `name` and `prompts_dir`; the prompt inline in `system_prompt`). Needs the key's
   * `agents:write` permission; ALREADY_EXISTS when the name is taken.
   */
  async createAgent(name: string, definition: JsonObject): Promise<AgentVersion> {
    const request = {
      name: requireString("name", name),
      definition: requireJsonObject("definition", definition),
    };
    return (await this.unary(false, (o) => this.agentService.createAgent(request, o))).agent!;
  }

  /**
   * Store `definition` (whole, not a patch) as the agent's next version. With `expectedVersion`
   * (the latest one read), ABORTED when another change came first.
   */
  async updateAgent(
    name: string,
    definition: JsonObject,
    options: { expectedVersion?: bigint | number } = {},
  ): Promise<AgentVersion> {
    const request = {
      name: requireString("name", name),
      definition: requireJsonObject("definition", definition),
      expectedVersion: toSeq("expectedVersion", options.expectedVersion),
    };
    return (await this.unary(false, (o) => this.agentService.updateAgent(request, o))).agent!;
  }

  /** An agent's latest version; "name@7" / `version` a given one, "name@prod" / `alias` an alias's. */
  async getAgent(ref: string, options: GetAgentOptions = {}): Promise<AgentVersion> {
    const request = {
      name: requireString("ref", ref),
      version: toSeq("version", options.version),
      alias: requireString("alias", options.alias, { optional: true }),
    };
    return (await this.unary("getAgent", (o) => this.agentService.getAgent(request, o))).agent!;
  }

  /** One page of an agent's versions, newest first, with every alias. */
  async listAgentVersions(
    name: string,
    options: { pageSize?: number; pageToken?: string } = {},
  ): Promise<AgentVersionsPage> {
    const request = {
      name: requireString("name", name),
      pageSize: requirePageSize(options.pageSize),
      pageToken: requireString("pageToken", options.pageToken, { optional: true }),
    };
    const reply = await this.unary("listAgentVersions", (o) => this.agentService.listAgentVersions(request, o));
    return { versions: reply.versions, aliases: { ...reply.aliases }, nextPageToken: reply.nextPageToken };
  }

  /**
   * Delete an agent with every version and alias; returns how many versions went. Not retried on
   * UNAVAILABLE: a second attempt after a first that worked would say NOT_FOUND.
   */
  async deleteAgent(name: string): Promise<bigint> {
    const request = { name: requireString("name", name) };
    return (await this.unary(false, (o) => this.agentService.deleteAgent(request, o))).deletedVersions;
  }

  /** Point `alias` at `version` (creating or moving it); `previousVersion` is 0n for a new alias. */
  async setAgentAlias(
    name: string,
    alias: string,
    version: bigint | number,
  ): Promise<{ agent: AgentVersion; previousVersion: bigint }> {
    const request = {
      name: requireString("name", name),
      alias: requireString("alias", alias),
      version: toSeq("version", version),
    };
    const reply = await this.unary("setAgentAlias", (o) => this.agentService.setAgentAlias(request, o));
    return { agent: reply.agent!, previousVersion: reply.previousVersion };
  }

  /** Remove an alias; returns the version it pointed at. */
  async deleteAgentAlias(name: string, alias: string): Promise<bigint> {
    const request = { name: requireString("name", name), alias: requireString("alias", alias) };
    return (await this.unary(false, (o) => this.agentService.deleteAgentAlias(request, o))).previousVersion;
  }

  /**
   * One page of the session's turns, oldest first: the message that started each, how it ended, the
   * seq range of its events and (`includeSteps`) its recorded steps. Pass `nextPageToken` back as
   * `pageToken` for the next page; it is "" on the last.
   */
  async listTurns(
    sessionId: string,
    options: ListTurnsOptions = {},
  ): Promise<{ turns: TurnRecord[]; nextPageToken: string }> {
    const includeSteps = options.includeSteps ?? false;
    if (typeof includeSteps !== "boolean")
      throw new TypeError(`includeSteps must be a boolean, got ${describe(includeSteps)}`);
    const request = {
      sessionId: requireString("sessionId", sessionId),
      pageSize: requirePageSize(options.pageSize),
      pageToken: requireString("pageToken", options.pageToken, { optional: true }),
      includeSteps,
    };
    const reply = await this.unary("listTurns", (o) => this.gateway.listTurns(request, o));
    return { turns: reply.turns, nextPageToken: reply.nextPageToken };
  }

  /**
   * One page of the session's conversation, oldest first; with `throughTurnId`, the conversation as it
   * was after that turn.
   */
  async listMessages(
    sessionId: string,
    options: ListMessagesOptions = {},
  ): Promise<{ messages: Message[]; nextPageToken: string }> {
    const request = {
      sessionId: requireString("sessionId", sessionId),
      pageSize: requirePageSize(options.pageSize),
      pageToken: requireString("pageToken", options.pageToken, { optional: true }),
      throughTurnId: requireString("throughTurnId", options.throughTurnId, { optional: true }),
    };
    const reply = await this.unary("listMessages", (o) => this.gateway.listMessages(request, o));
    return { messages: reply.messages, nextPageToken: reply.nextPageToken };
  }

  /**
   * A new session holding this one's conversation up to a turn (after it, or `beforeTurn`), in the
   * same tenant and scope; the original is untouched and the fork's `forkedFrom` says where it came
   * from. Not retried on UNAVAILABLE: the first attempt may have made a fork.
   */
  async forkSession(
    sessionId: string,
    options: ForkSessionOptions = {},
  ): Promise<{ session: Session; messageCount: number }> {
    const beforeTurn = options.beforeTurn ?? false;
    if (typeof beforeTurn !== "boolean")
      throw new TypeError(`beforeTurn must be a boolean, got ${describe(beforeTurn)}`);
    const request = {
      sessionId: requireString("sessionId", sessionId),
      turnId: requireString("turnId", options.turnId, { optional: true }),
      beforeTurn,
      agent: requireString("agent", options.agent, { optional: true }),
      labels: requireLabels(options.labels),
    };
    const reply = await this.unary(false, (o) => this.gateway.forkSession(request, o));
    return { session: reply.session!, messageCount: reply.messageCount };
  }

  /**
   * Drop `turnId` and every later turn from the conversation. The log stays append-only: the
   * returned `rewound` event (also delivered to every watcher) names the seq range whose events no
   * longer count (see `voided`). FAILED_PRECONDITION (TURN_IN_PROGRESS) while a turn runs or is paused.
   */
  async rewindSession(sessionId: string, turnId: string): Promise<RewindResult> {
    const request = { sessionId: requireString("sessionId", sessionId), turnId: requireString("turnId", turnId) };
    const reply = await this.unary(false, (o) => this.gateway.rewindSession(request, o));
    const event = reply.event;
    if (!event || !is(event, "rewound")) {
      throw new CogmeshError(Code.Internal, "RewindSession answered without its rewound event");
    }
    return { session: reply.session!, event };
  }

  /** Delete a session; false when it did not exist. */
  async deleteSession(sessionId: string): Promise<boolean> {
    const request = { sessionId: requireString("sessionId", sessionId) };
    return (await this.unary("deleteSession", (o) => this.gateway.deleteSession(request, o))).deleted;
  }

  /** Ask the running turn (or `turnId`) to stop; `cancelled` is false when nothing was running. */
  async cancelTurn(sessionId: string, turnId?: string): Promise<{ cancelled: boolean; turnId: string }> {
    const request = {
      sessionId: requireString("sessionId", sessionId),
      turnId: requireString("turnId", turnId, { optional: true }),
    };
    const reply = await this.unary("cancelTurn", (o) => this.gateway.cancelTurn(request, o));
    return { cancelled: reply.cancelled, turnId: reply.turnId };
  }

  async listAgents(): Promise<Agent[]> {
    return (await this.unary("listAgents", (o) => this.gateway.listAgents({}, o))).agents;
  }

  /** The model catalogue, optionally one provider's, and the default model's id. */
  async listModels(options: { provider?: string } = {}): Promise<{ models: Model[]; defaultModel: string }> {
    const request = { provider: requireString("provider", options.provider, { optional: true }) };
    const reply = await this.unary("listModels", (o) => this.gateway.listModels(request, o));
    return { models: reply.models, defaultModel: reply.defaultModel };
  }

  /**
   * Start a turn and stream its events until its final or error event, or until it
   * pauses (a status event in TURN_STATE_PAUSED, see isPause). If the stream breaks
   * after the turn started, the rest is read with Subscribe from the last seq, so
   * each event arrives once.
   */
  async *sendMessage(sessionId: string, content: string, options: SendOptions = {}): AsyncGenerator<RuntimeEvent> {
    const request = {
      sessionId: requireString("sessionId", sessionId),
      content: requireString("content", content),
      model: requireString("model", options.model, { optional: true }),
      multitaskStrategy: toMultitask(options.multitaskStrategy),
    };
    yield* this.turn(request.sessionId, options.signal, (signal) => this.gateway.sendMessage(request, { signal }));
  }

  /**
   * Answer an approval_required event: run the tool call as proposed ("approve"), with
   * `editedArguments` ("edit"), or not at all ("reject", the model reads `reason`). Streams
   * the resumed turn like sendMessage: until it ends or pauses again.
   */
  async *resolveApproval(
    sessionId: string,
    interruptId: string,
    decision: Decision | ApprovalDecision,
    options: ResolveApprovalOptions = {},
  ): AsyncGenerator<RuntimeEvent> {
    const value = toDecision(decision);
    const edited = options.editedArguments;
    if (value === ApprovalDecision.EDIT && edited === undefined) {
      throw new TypeError('editedArguments is required with decision "edit"');
    }
    if (value !== ApprovalDecision.EDIT && edited !== undefined) {
      throw new TypeError('editedArguments only goes with decision "edit"');
    }
    if (value !== ApprovalDecision.REJECT && options.reason !== undefined) {
      throw new TypeError('reason only goes with decision "reject"');
    }
    const request = create(ResolveApprovalRequestSchema, {
      sessionId: requireString("sessionId", sessionId),
      interruptId: requireString("interruptId", interruptId),
      decision: value,
      editedArguments: edited === undefined ? undefined : requireJsonObject("editedArguments", edited),
      reason: requireString("reason", options.reason, { optional: true }),
    });
    yield* this.turn(request.sessionId, options.signal, (signal) => this.gateway.resolveApproval(request, { signal }));
  }

  /** Answer a user_input_requested event (`userInput`) or a client_tool_call (`toolResult`); streams the resumed turn. */
  async *answerInterrupt(
    sessionId: string,
    interruptId: string,
    answer: InterruptAnswer,
    options: StreamOptions = {},
  ): AsyncGenerator<RuntimeEvent> {
    if (typeof answer !== "object" || answer === null) {
      throw new TypeError(`answer must be {userInput} or {toolResult, isError?}, got ${describe(answer)}`);
    }
    const given = ["userInput", "toolResult"].filter((k) => k in answer);
    if (given.length !== 1) throw new TypeError("answer must have exactly one of userInput and toolResult");
    const request = create(AnswerInterruptRequestSchema, {
      sessionId: requireString("sessionId", sessionId),
      interruptId: requireString("interruptId", interruptId),
    });
    if ("userInput" in answer) {
      request.answer = { case: "userInput", value: requireString("userInput", answer.userInput) };
    } else {
      const isError = answer.isError ?? false;
      if (typeof isError !== "boolean") throw new TypeError(`isError must be a boolean, got ${describe(isError)}`);
      const content = requireString("toolResult", answer.toolResult);
      request.answer = { case: "toolResult", value: create(ClientToolResultSchema, { content, isError }) };
    }
    yield* this.turn(request.sessionId, options.signal, (signal) => this.gateway.answerInterrupt(request, { signal }));
  }

  /**
   * Run one turn and wait for its answer. A turn that ends with an error event throws
   * TurnFailedError; one that pauses for an answer throws TurnPausedError, which
   * approve / edit / reject / answer take to resume it.
   */
  async ask(sessionId: string, content: string, options: SendOptions = {}): Promise<TurnResult> {
    return this.collect(this.sendMessage(sessionId, content, options));
  }

  /** Approve the tool call a paused turn waits on, and wait for the resumed turn like `ask`. */
  async approve(interrupt: Interrupt, options: StreamOptions = {}): Promise<TurnResult> {
    const { sessionId, interruptId } = requireInterrupt("approve", interrupt, "approval");
    return this.collect(this.resolveApproval(sessionId, interruptId, "approve", options));
  }

  /** Run the tool call a paused turn waits on with these arguments instead. */
  async edit(interrupt: Interrupt, editedArguments: JsonObject, options: StreamOptions = {}): Promise<TurnResult> {
    const { sessionId, interruptId } = requireInterrupt("edit", interrupt, "approval");
    return this.collect(this.resolveApproval(sessionId, interruptId, "edit", { ...options, editedArguments }));
  }

  /** Refuse the tool call a paused turn waits on; the model reads `reason`. */
  async reject(interrupt: Interrupt, reason = "", options: StreamOptions = {}): Promise<TurnResult> {
    const { sessionId, interruptId } = requireInterrupt("reject", interrupt, "approval");
    return this.collect(this.resolveApproval(sessionId, interruptId, "reject", { ...options, reason }));
  }

  /** Answer the question of a turn paused for the user's input. */
  async answer(interrupt: Interrupt, userInput: string, options: StreamOptions = {}): Promise<TurnResult> {
    const { sessionId, interruptId } = requireInterrupt("answer", interrupt, "userInput");
    return this.collect(this.answerInterrupt(sessionId, interruptId, { userInput }, options));
  }

  /**
   * Replay the session's events after `afterSeq`, then follow new ones (or stop when
   * idle). A broken stream is resumed from the last seq handed out.
   */
  async *subscribe(sessionId: string, options: SubscribeOptions = {}): AsyncGenerator<RuntimeEvent> {
    const id = requireString("sessionId", sessionId);
    const afterSeq = toSeq("afterSeq", options.afterSeq);
    const signal = this.signal(options.signal);
    yield* this.follow(id, afterSeq, Boolean(options.stopWhenIdle), signal, options.onHeartbeat, 0);
  }

  // One turn's stream (SendMessage, ResolveApproval or AnswerInterrupt) until it ends or pauses;
  // if it breaks after the first event, the rest comes from Subscribe.
  private async *turn(
    sessionId: string,
    caller: AbortSignal | undefined,
    open: (signal: AbortSignal) => AsyncIterable<{ events: RuntimeEvent[] }>,
  ): AsyncGenerator<RuntimeEvent> {
    const signal = this.signal(caller);
    const limits = this.rateLimitWait();
    let turnId = "";
    let lastSeq = 0n;
    for (;;) {
      try {
        for await (const reply of open(signal)) {
          for (const event of reply.events) {
            turnId = event.turnId;
            lastSeq = event.seq;
            yield event;
            if (isTerminal(event) || isPause(event)) return;
          }
        }
        // Ended without the turn's last event (a draining gateway): read the rest from the log.
        if (!turnId) throw new CogmeshError(Code.Unavailable, "the turn's stream ended before its first event");
        break;
      } catch (err) {
        const error = this.failure(err, signal);
        if (turnId) {
          if (!error.resumable) throw error;
          break;
        }
        // Before the first event we cannot know whether the turn started, and sending again is not safe,
        // unless the gateway refused the call at admission (rate limits), before any handler ran.
        const wait = limits.delayMs(error, false);
        if (wait === undefined) throw error;
        await this.pause(wait, signal);
      }
    }
    for await (const event of this.follow(sessionId, lastSeq, false, signal, undefined, 1)) {
      if (event.turnId !== turnId) continue;
      yield event;
      if (isTerminal(event) || isPause(event)) return;
    }
  }

  private async collect(stream: AsyncIterable<RuntimeEvent>): Promise<TurnResult> {
    const events: RuntimeEvent[] = [];
    for await (const event of stream) {
      events.push(event);
      if (is(event, "error")) throw new TurnFailedError(event);
      if (is(event, "final")) {
        const final = event.payload.value;
        return { turnId: event.turnId, text: finalText(final, events), final, events };
      }
      if (isPause(event)) {
        const id = event.payload.value.interruptId;
        throw new TurnPausedError(
          event,
          events.find((e) => interruptOf(e) === id),
        );
      }
    }
    throw new CogmeshError(Code.Unavailable, "the turn's stream ended before its final event");
  }

  // Subscribe from `cursor`, reconnecting on resumable failures; `failures` counts
  // breaks already suffered (SendMessage's) toward `resumeAttempts`.
  private async *follow(
    sessionId: string,
    cursor: bigint,
    stopWhenIdle: boolean,
    signal: AbortSignal,
    onHeartbeat: (() => void) | undefined,
    failures: number,
  ): AsyncGenerator<RuntimeEvent> {
    const limits = this.rateLimitWait();
    let limited = false;
    for (;;) {
      if (failures > 0 && !limited) await this.backoff(failures, signal);
      limited = false;
      try {
        const request = create(SubscribeRequestSchema, { sessionId, afterSeq: cursor, stopWhenIdle });
        for await (const reply of this.gateway.subscribe(request, { signal })) {
          failures = 0; // progress: the connection works again
          limits.reset();
          if (reply.heartbeat) onHeartbeat?.();
          for (const event of reply.events) {
            if (event.seq <= cursor) continue; // at-least-once on the wire: drop what was handed out
            cursor = event.seq;
            yield event;
          }
        }
        if (stopWhenIdle) return; // caught up and idle, as asked
        // A following stream only ends by error or cancellation; a clean end is a draining gateway.
        throw new CogmeshError(Code.Unavailable, "Subscribe ended while following", { broken: true });
      } catch (err) {
        const error = this.failure(err, signal);
        const wait = limits.delayMs(error, true); // over the tenant's rate or stream cap: come back when told
        if (wait !== undefined) {
          await this.pause(wait, signal);
          limited = true;
          continue;
        }
        if (!error.resumable || failures >= this.resumeAttempts) throw error;
        failures += 1;
      }
    }
  }

  private async unary<T>(
    idempotent: IdempotentMethod | false,
    call: (options: { signal: AbortSignal; timeoutMs: number }) => Promise<T>,
  ): Promise<T> {
    const signal = this.signal(undefined);
    const limits = this.rateLimitWait();
    for (let attempt = 1; ;) {
      try {
        return await call({ signal, timeoutMs: this.timeoutMs });
      } catch (err) {
        const error = this.failure(err, signal);
        // createSession is not idempotent: it is sent again only when the gateway refused it at the door.
        const wait = limits.delayMs(error, idempotent !== false);
        if (wait !== undefined) {
          await this.pause(wait, signal);
          continue;
        }
        if (!idempotent || error.code !== Code.Unavailable || attempt >= this.maxAttempts) throw error;
        await this.backoff(attempt, signal);
        attempt += 1;
      }
    }
  }

  private rateLimitWait(): RateLimitWait {
    return new RateLimitWait(this.rateLimitAttempts, this.rateLimitWaitMs);
  }

  // The caller's signal joined with the client's lifetime; fails fast once closed.
  private signal(caller: AbortSignal | undefined): AbortSignal {
    if (caller !== undefined && !(caller instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal");
    if (this.closed) throw new CogmeshError(Code.Canceled, "client is closed");
    return caller ? AbortSignal.any([caller, this.lifetime.signal]) : this.lifetime.signal;
  }

  private failure(err: unknown, signal: AbortSignal): CogmeshError {
    if (this.closed) return new CogmeshError(Code.Canceled, "client is closed", { cause: err });
    if (signal.aborted) return new CogmeshError(Code.Canceled, "aborted by the caller", { cause: signal.reason });
    return CogmeshError.from(err);
  }

  private async backoff(attempt: number, signal: AbortSignal): Promise<void> {
    await this.pause(Math.min(this.backoffMs * 2 ** (attempt - 1), 2_000), signal);
  }

  private async pause(delay: number, signal: AbortSignal): Promise<void> {
    try {
      await sleep(delay, signal);
    } catch (err) {
      throw this.failure(err, signal);
    }
  }
}

// setTimeout that an abort ends early with the signal's reason (Node's timers/promises is not in browsers).
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const done = () => {
      signal.removeEventListener("abort", aborted);
      resolve();
    };
    const aborted = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", aborted, { once: true });
  });
}
