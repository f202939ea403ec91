// @cogmesh/client/web: the client for browsers, over the Connect protocol or gRPC-Web to
// cogmesh's browser edge (`cogmesh up` serves it on COGMESH_WEB_ADDR, default 127.0.0.1:50050).
// The same CogmeshClientBase as in Node (typed events, pauses, resume, rate-limit waits), the
// same generated code; no Node API, so any bundler takes it.
//
// Browsers cannot open client or bidirectional streams over fetch, so Converse is not here:
// SendMessage, Subscribe, ResolveApproval and AnswerInterrupt are server streams and work.
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";

import { bearer, CogmeshClientBase, type CallOptions } from "./core.js";

export type WebProtocol = "connect" | "grpc-web";

export interface WebTransportOptions {
  /** The browser edge's URL, e.g. "http://127.0.0.1:50050" or "" / location.origin for the page's own. */
  baseUrl: string;
  /** API key sent as `authorization: Bearer <key>` (the edge passes it to the gateway). */
  apiKey?: string;
  /** Wire protocol: "connect" (default; JSON, readable in the network panel) or "grpc-web" (binary). */
  protocol?: WebProtocol;
  /** Extra Connect interceptors, run after the auth header is set. */
  interceptors?: Interceptor[];
}

export interface WebClientOptions extends CallOptions, WebTransportOptions {}

/** A Connect or gRPC-Web transport to the browser edge, with the bearer key on every call. */
export function createWebTransport(options: WebTransportOptions): Transport {
  const protocol = options.protocol ?? "connect";
  if (protocol !== "connect" && protocol !== "grpc-web") {
    throw new RangeError(`protocol must be "connect" or "grpc-web", got ${JSON.stringify(protocol)}`);
  }
  if (typeof options.baseUrl !== "string") throw new TypeError("baseUrl must be a string");
  const interceptors = [...(options.apiKey ? [bearer(options.apiKey)] : []), ...(options.interceptors ?? [])];
  // The page's origin when baseUrl is "": the console is served by the edge itself.
  const page = (globalThis as { location?: { origin: string } }).location;
  const baseUrl = options.baseUrl || page?.origin || "";
  return protocol === "connect"
    ? createConnectTransport({ baseUrl, interceptors, useBinaryFormat: false })
    : createGrpcWebTransport({ baseUrl, interceptors });
}

export class CogmeshWebClient extends CogmeshClientBase {
  readonly baseUrl: string;
  readonly protocol: WebProtocol;

  constructor(options: WebClientOptions) {
    super(createWebTransport(options), options);
    this.baseUrl = options.baseUrl;
    this.protocol = options.protocol ?? "connect";
  }
}

export { bearer, CogmeshClientBase } from "./core.js";
export type {
  AgentVersionsPage,
  CallOptions,
  CreateSessionOptions,
  Decision,
  ForkSessionOptions,
  GetAgentOptions,
  Interrupt,
  InterruptAnswer,
  ListMessagesOptions,
  ListSessionsOptions,
  ListTurnsOptions,
  ResolveApprovalOptions,
  RewindResult,
  SendOptions,
  StreamOptions,
  SubscribeOptions,
  TurnResult,
} from "./core.js";
export { Code, CogmeshError, type FieldViolation } from "./errors.js";
export {
  interruptOf,
  is,
  isPause,
  isTerminal,
  pauseKindOf,
  TurnFailedError,
  TurnPausedError,
  voided,
  voidRange,
  withoutVoided,
  streamedText,
  finalText,
  type EventKind,
  type EventOf,
  type PauseKind,
} from "./events.js";
export { create, fromJson, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
export type { Timestamp } from "@bufbuild/protobuf/wkt";
export * from "./gen/cogmesh/common/v1/events_pb.js";
export * from "./gen/cogmesh/common/v1/messages_pb.js";
export * from "./gen/cogmesh/common/v1/resources_pb.js";
export * from "./gen/cogmesh/common/v1/turns_pb.js";
export * from "./gen/cogmesh/common/v1/errors_pb.js";
export * from "./gen/cogmesh/gateway/v1/gateway_pb.js";
export * from "./gen/cogmesh/gateway/v1/agents_pb.js";
