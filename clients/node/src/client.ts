// CogmeshClient: a small typed wrapper over the generated GatewayService client.
//
// - Auth: `apiKey` goes out as `authorization: Bearer <key>` on every call.
// - Deadlines: every unary call gets `timeoutMs`; streams run until they end or are aborted.
// - Retries: idempotent unary calls are retried on UNAVAILABLE with backoff.
// - Resume: when a stream breaks (network, gateway restart, slow-reader cut-off), the
//   client reconnects with Subscribe from the last seq it handed out, so the caller
//   sees every event once and in order.
import { setTimeout as sleep } from "node:timers/promises";
import type { SecureClientSessionOptions } from "node:http2";

import { create } from "@bufbuild/protobuf";
import { Code, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import type { RuntimeEvent } from "./gen/cogmesh/common/v1/events_pb.js";
import type { Agent, Model, Session } from "./gen/cogmesh/common/v1/resources_pb.js";
import { GatewayService, SubscribeRequestSchema } from "./gen/cogmesh/gateway/v1/gateway_pb.js";
import { CogmeshError } from "./errors.js";
import { interruptOf, is, isPause, isTerminal, TurnFailedError, TurnPausedError, type EventOf } from "./events.js";

export const DEFAULT_ADDRESS = "127.0.0.1:50051";

export interface TlsOptions {
  /** PEM root certificates to trust instead of the system's (a private CA). */
  ca?: string | Buffer;
  /** PEM client certificate, for mutual TLS. */
  cert?: string | Buffer;
  /** PEM client private key, for mutual TLS. */
  key?: string | Buffer;
}

export interface ClientOptions {
  /** Gateway as "host:port" or a URL ("https://host:port"). Default: $COGMESH_GATEWAY_ADDR, else 127.0.0.1:50051. */
  address?: string;
  /** API key sent as `authorization: Bearer <key>`. Default: $COGMESH_API_KEY. */
  apiKey?: string;
  /** TLS: `true` with the system's roots, or PEM material for a private CA / mTLS. Default: plaintext. */
  tls?: boolean | TlsOptions;
  /** Deadline of each unary call in milliseconds. Default 10 000. */
  timeoutMs?: number;
  /** Attempts of an idempotent unary call while the gateway is UNAVAILABLE. Default 4. */
  maxAttempts?: number;
  /** Reconnections of a broken stream in a row without receiving anything. Default 5. */
  resumeAttempts?: number;
  /** First backoff between attempts in milliseconds (doubles, capped at 2 s). Default 100. */
  backoffMs?: number;
  /** Extra Connect interceptors (tracing, logging), run after the auth header is set. */
  interceptors?: Interceptor[];
  /** Use this Connect transport instead of building one (the caller owns it and sets its auth and TLS). */
  transport?: Transport;
}

export interface CreateSessionOptions {
  /** Agent to talk to; default "default". */
  agent?: string;
  /** Application user id. */
  userId?: string;
  /** Application topic id. */
  topicId?: string;
}

export interface StreamOptions {
  /** Abort to stop the stream; the iterator then throws a CANCELED CogmeshError. */
  signal?: AbortSignal;
}

export interface SendOptions extends StreamOptions {
  /** Model name for this turn instead of the agent's. */
  model?: string;
}

export interface SubscribeOptions extends StreamOptions {
  /** Deliver events with seq greater than this; 0 (default) replays everything retained. */
  afterSeq?: bigint | number;
  /** End once caught up and no turn is running, instead of following the session. */
  stopWhenIdle?: boolean;
  /** Called on each heartbeat the gateway sends while the session is idle. */
  onHeartbeat?: () => void;
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

// Safe to repeat: reads, deletes and cancels. CreateSession and SendMessage are not.
type IdempotentMethod = "getSession" | "listSessions" | "deleteSession" | "cancelTurn" | "listAgents" | "listModels";

function requireString(name: string, value: unknown, { optional = false } = {}): string {
  if (value === undefined && optional) return "";
  if (typeof value !== "string") {
    throw new TypeError(`${name} must be a string, got ${value === null ? "null" : typeof value}`);
  }
  return value;
}

function toSeq(name: string, value: unknown): bigint {
  if (value === undefined) return 0n;
  if (typeof value === "bigint" && value >= 0n) return value;
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  throw new TypeError(`${name} must be a non-negative integer (number or bigint), got ${String(value)}`);
}

function baseUrl(address: string, tls: boolean): string {
  if (/^https?:\/\//.test(address)) return address;
  return `${tls ? "https" : "http"}://${address}`;
}

export class CogmeshClient {
  /** The generated GatewayService client, for anything this wrapper does not cover. */
  readonly gateway: Client<typeof GatewayService>;
  readonly address: string;
  private readonly timeoutMs: number;
  private readonly maxAttempts: number;
  private readonly resumeAttempts: number;
  private readonly backoffMs: number;
  private readonly sessions?: Http2SessionManager;
  // Aborted by close(): ends every call and stream still open.
  private readonly lifetime = new AbortController();

  constructor(options: ClientOptions = {}) {
    if (options.transport) {
      const clash = (["address", "apiKey", "tls", "interceptors"] as const).filter((k) => options[k] !== undefined);
      if (clash.length > 0)
        throw new TypeError(`transport cannot be combined with ${clash.join(", ")}: set them on the transport`);
    }
    const address = options.address ?? process.env.COGMESH_GATEWAY_ADDR ?? DEFAULT_ADDRESS;
    const apiKey = options.transport ? "" : (options.apiKey ?? process.env.COGMESH_API_KEY ?? "");
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxAttempts = Math.max(1, options.maxAttempts ?? 4);
    this.resumeAttempts = Math.max(0, options.resumeAttempts ?? 5);
    this.backoffMs = options.backoffMs ?? 100;
    const interceptors: Interceptor[] = [];
    if (apiKey) {
      interceptors.push((next) => async (req) => {
        req.header.set("authorization", `Bearer ${apiKey}`);
        return next(req);
      });
    }
    interceptors.push(...(options.interceptors ?? []));
    let transport = options.transport;
    this.address = options.transport ? "" : address;
    if (!transport) {
      const url = baseUrl(address, Boolean(options.tls));
      const nodeOptions: SecureClientSessionOptions = typeof options.tls === "object" ? { ...options.tls } : {};
      this.sessions = new Http2SessionManager(url, {}, nodeOptions);
      transport = createGrpcTransport({ baseUrl: url, sessionManager: this.sessions, interceptors });
    }
    this.gateway = createClient(GatewayService, transport);
  }

  /** Abort every open call and stream and close the connection. Later calls fail with CANCELED. */
  close(): void {
    if (this.lifetime.signal.aborted) return;
    this.lifetime.abort(new CogmeshError(Code.Canceled, "client is closed"));
    this.sessions?.abort();
  }

  get closed(): boolean {
    return this.lifetime.signal.aborted;
  }

  async createSession(options: CreateSessionOptions = {}): Promise<Session> {
    const request = {
      agent: requireString("agent", options.agent, { optional: true }),
      userId: requireString("userId", options.userId, { optional: true }),
      topicId: requireString("topicId", options.topicId, { optional: true }),
    };
    const reply = await this.unary(false, (o) => this.gateway.createSession(request, o));
    return reply.session!;
  }

  async getSession(sessionId: string): Promise<Session> {
    const request = { sessionId: requireString("sessionId", sessionId) };
    return (await this.unary("getSession", (o) => this.gateway.getSession(request, o))).session!;
  }

  async listSessions(options: { pageSize?: number; pageToken?: string } = {}): Promise<{
    sessions: Session[];
    nextPageToken: string;
  }> {
    const pageSize = options.pageSize ?? 0;
    if (!Number.isInteger(pageSize)) throw new TypeError(`pageSize must be an integer, got ${String(pageSize)}`);
    const request = { pageSize, pageToken: requireString("pageToken", options.pageToken, { optional: true }) };
    const reply = await this.unary("listSessions", (o) => this.gateway.listSessions(request, o));
    return { sessions: reply.sessions, nextPageToken: reply.nextPageToken };
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
    };
    const signal = this.signal(options.signal);
    let turnId = "";
    let lastSeq = 0n;
    try {
      for await (const reply of this.gateway.sendMessage(request, { signal })) {
        for (const event of reply.events) {
          turnId = event.turnId;
          lastSeq = event.seq;
          yield event;
          if (isTerminal(event) || isPause(event)) return;
        }
      }
      // Ended without the turn's last event (a draining gateway): read the rest from the log.
      if (!turnId) throw new CogmeshError(Code.Unavailable, "SendMessage ended before the turn's first event");
    } catch (err) {
      const error = this.failure(err, signal);
      // Before the first event we cannot know whether the turn started, and sending again is not safe.
      if (!turnId || !error.resumable) throw error;
    }
    for await (const event of this.follow(sessionId, lastSeq, false, signal, undefined, 1)) {
      if (event.turnId !== turnId) continue;
      yield event;
      if (isTerminal(event) || isPause(event)) return;
    }
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

  /**
   * Run one turn and wait for its answer. A turn that ends with an error event throws
   * TurnFailedError; one that pauses for an answer throws TurnPausedError.
   */
  async ask(sessionId: string, content: string, options: SendOptions = {}): Promise<TurnResult> {
    const events: RuntimeEvent[] = [];
    for await (const event of this.sendMessage(sessionId, content, options)) {
      events.push(event);
      if (is(event, "error")) throw new TurnFailedError(event);
      if (is(event, "final")) {
        return { turnId: event.turnId, text: event.payload.value.text, final: event.payload.value, events };
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
    for (;;) {
      if (failures > 0) await this.backoff(failures, signal);
      try {
        const request = create(SubscribeRequestSchema, { sessionId, afterSeq: cursor, stopWhenIdle });
        for await (const reply of this.gateway.subscribe(request, { signal })) {
          failures = 0; // progress: the connection works again
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
    for (let attempt = 1; ; attempt++) {
      try {
        return await call({ signal, timeoutMs: this.timeoutMs });
      } catch (err) {
        const error = this.failure(err, signal);
        if (!idempotent || error.code !== Code.Unavailable || attempt >= this.maxAttempts) throw error;
        await this.backoff(attempt, signal);
      }
    }
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
    const delay = Math.min(this.backoffMs * 2 ** (attempt - 1), 2_000);
    try {
      await sleep(delay, undefined, { signal });
    } catch (err) {
      throw this.failure(err, signal);
    }
  }
}
