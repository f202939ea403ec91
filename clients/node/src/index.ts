// @cogmesh/client: a typed Node client for cogmesh's GatewayService.
export { CogmeshClient, DEFAULT_ADDRESS, type ClientOptions, type TlsOptions } from "./client.js";
export { bearer, CogmeshClientBase, toMultitask } from "./core.js";
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
  Multitask,
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
  streamedText,
  finalText,
  TurnFailedError,
  TurnPausedError,
  voided,
  voidRange,
  withoutVoided,
  type EventKind,
  type EventOf,
  type PauseKind,
} from "./events.js";

// Generated types and schemas, for code that needs more than the wrapper.
export * from "./gen/cogmesh/common/v1/events_pb.js";
export * from "./gen/cogmesh/common/v1/messages_pb.js";
export * from "./gen/cogmesh/common/v1/resources_pb.js";
export * from "./gen/cogmesh/common/v1/turns_pb.js";
export * from "./gen/cogmesh/common/v1/errors_pb.js";
export * from "./gen/cogmesh/gateway/v1/gateway_pb.js";
export * from "./gen/cogmesh/gateway/v1/agents_pb.js";
