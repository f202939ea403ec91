// Errors from cogmesh as one class carrying what the server put in
// google.rpc.Status: the gRPC code, the ErrorInfo reason, BadRequest field
// violations and a RetryInfo delay, so callers branch on `err.reason`.
import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

export { Code };

/** One bad field of a request, as the server named it (snake_case proto field name). */
export interface FieldViolation {
  field: string;
  description: string;
}

/** "NotFound" -> "NOT_FOUND": the names gRPC tools and the other clients print. */
function codeName(code: Code): string {
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

export class CogmeshError extends Error {
  override readonly name = "CogmeshError";
  /** The gRPC status code. */
  readonly code: Code;
  /** The code as gRPC spells it, e.g. "INVALID_ARGUMENT". */
  readonly codeName: string;
  /** ErrorInfo reason, e.g. "SESSION_NOT_FOUND" (cogmesh.common.v1.ErrorReason without its prefix); "" if none. */
  readonly reason: string;
  /** ErrorInfo metadata, e.g. {resume_after_seq: "42"}. */
  readonly metadata: Readonly<Record<string, string>>;
  /** BadRequest field violations: present on INVALID_ARGUMENT. */
  readonly violations: readonly FieldViolation[];
  /** RetryInfo delay in milliseconds, when the server asked the caller to wait. */
  readonly retryDelayMs: number | undefined;
  /** True when the connection broke (reset, refused, closed) rather than the server answering with a status. */
  readonly broken: boolean;

  constructor(
    code: Code,
    message: string,
    options: {
      reason?: string;
      metadata?: Record<string, string>;
      violations?: FieldViolation[];
      retryDelayMs?: number;
      broken?: boolean;
      cause?: unknown;
    } = {},
  ) {
    super(`${codeName(code)}: ${message}`, { cause: options.cause });
    this.code = code;
    this.codeName = codeName(code);
    this.reason = options.reason ?? "";
    this.metadata = Object.freeze({ ...options.metadata });
    this.violations = Object.freeze([...(options.violations ?? [])]);
    this.retryDelayMs = options.retryDelayMs;
    this.broken = options.broken ?? false;
  }

  /** True for a failure worth reconnecting for: the connection broke, the gateway is unavailable, or it cut off a slow reader. */
  get resumable(): boolean {
    return this.code === Code.Unavailable || this.reason === "SUBSCRIBER_TOO_SLOW";
  }

  /** Decode a ConnectError (or anything thrown by a call) into a CogmeshError. */
  static from(err: unknown): CogmeshError {
    if (err instanceof CogmeshError) return err;
    const connect = ConnectError.from(err);
    // A status the server sent arrives in the trailers; without one, the client saw the
    // connection fail (reset, refused, closed mid-stream): gRPC calls that UNAVAILABLE.
    const fromServer = connect.metadata.has("grpc-status");
    const broken = !fromServer && [Code.Canceled, Code.Aborted, Code.Unavailable].includes(connect.code);
    let reason = "";
    let metadata: Record<string, string> = {};
    let retryDelayMs: number | undefined;
    const violations: FieldViolation[] = [];
    for (const info of connect.findDetails(ErrorInfoSchema)) {
      reason = info.reason;
      metadata = { ...info.metadata };
    }
    for (const bad of connect.findDetails(BadRequestSchema)) {
      for (const v of bad.fieldViolations) violations.push({ field: v.field, description: v.description });
    }
    for (const retry of connect.findDetails(RetryInfoSchema)) {
      if (retry.retryDelay) {
        retryDelayMs = Number(retry.retryDelay.seconds) * 1000 + Math.round(retry.retryDelay.nanos / 1e6);
      }
    }
    const message = connect.rawMessage || codeName(connect.code);
    return new CogmeshError(
      broken ? Code.Unavailable : connect.code,
      broken ? `connection broke: ${message}` : message,
      {
        reason,
        metadata,
        violations,
        retryDelayMs,
        broken,
        cause: err,
      },
    );
  }
}
