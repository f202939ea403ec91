// Waiting out the gateway's rate limits: RESOURCE_EXHAUSTED with a RetryInfo delay.
//
// A tenant over its request rate (or its cap on open streams) is answered
// RESOURCE_EXHAUSTED, reason RATE_LIMITED, with a RetryInfo delay. The client waits that
// delay and tries again, a bounded number of times and for a bounded total wait:
// - idempotent calls (reads, deleteSession, cancelTurn, subscribe) on any
//   RESOURCE_EXHAUSTED that carries a delay;
// - calls that are not (createSession; sendMessage, resolveApproval, answerInterrupt
//   before their first event) only when the gateway refused them at admission
//   (RATE_LIMITED): the call never reached a handler, so nothing started.
// Anything else is thrown as it came, and so is a refusal whose delay would overrun the
// wait budget (waiting less than the gateway asked would only be refused again).
import { Code, type CogmeshError } from "./errors.js";

export const RATE_LIMITED = "RATE_LIMITED";

/** One call's budget of attempts and waiting for rate limits. */
export class RateLimitWait {
  private retriesLeft: number;
  private waitLeftMs: number;

  /** `attempts` in all (1 never waits), `maxWaitMs` of waiting in all. */
  constructor(
    private readonly attempts: number,
    private readonly maxWaitMs: number,
  ) {
    this.retriesLeft = Math.max(attempts - 1, 0);
    this.waitLeftMs = maxWaitMs;
  }

  /** Milliseconds to wait before trying `error`'s call again, or undefined to throw it. */
  delayMs(error: CogmeshError, idempotent: boolean): number | undefined {
    const delay = error.retryDelayMs;
    if (error.code !== Code.ResourceExhausted || delay === undefined || delay < 0) return undefined;
    if (!idempotent && error.reason !== RATE_LIMITED) return undefined;
    if (this.retriesLeft <= 0 || delay > this.waitLeftMs) return undefined;
    this.retriesLeft -= 1;
    this.waitLeftMs -= delay;
    return delay;
  }

  /** The call made progress (a stream delivered something): the next refusal gets a fresh budget. */
  reset(): void {
    this.retriesLeft = Math.max(this.attempts - 1, 0);
    this.waitLeftMs = this.maxWaitMs;
  }
}
