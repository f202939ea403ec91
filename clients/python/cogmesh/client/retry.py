"""Waiting out the gateway's rate limits: RESOURCE_EXHAUSTED with a RetryInfo delay.

A tenant over its request rate (or its cap on open streams) is answered
RESOURCE_EXHAUSTED, reason RATE_LIMITED, with a RetryInfo delay. The client waits
that delay and tries again, a bounded number of times and for a bounded total wait:

- idempotent calls (reads, DeleteSession, CancelTurn, Subscribe) on any
  RESOURCE_EXHAUSTED that carries a delay;
- calls that are not idempotent (CreateSession, and SendMessage, ResolveApproval,
  AnswerInterrupt before their first event) only when the gateway refused them at
  admission (RATE_LIMITED): the call never reached a handler, so nothing started.

Anything else is raised as it came, and so is a refusal whose delay would overrun
the wait budget (waiting less than the gateway asked would only be refused again).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cogmesh.client.errors import GatewayError

RATE_LIMITED = "RATE_LIMITED"


@dataclass(frozen=True)
class RateLimitRetry:
    """How long one call may wait out rate limits: `attempts` in all (1: never wait), `max_wait_s` of waiting."""

    attempts: int = 3
    max_wait_s: float = 10.0

    def start(self) -> Waiter:
        return Waiter(self)


class Waiter:
    """One call's budget of attempts and waiting."""

    def __init__(self, policy: RateLimitRetry):
        self.policy = policy
        self.retries_left = max(policy.attempts - 1, 0)
        self.wait_left = policy.max_wait_s

    def delay(self, error: BaseException, *, idempotent: bool) -> float | None:
        """Seconds to wait before trying `error`'s call again, or None to raise it (the budget is then spent)."""
        if not isinstance(error, GatewayError) or error.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
            return None
        if error.retry_after_s is None or error.retry_after_s < 0:
            return None
        if not idempotent and error.reason != RATE_LIMITED:
            return None
        if self.retries_left <= 0 or error.retry_after_s > self.wait_left:
            return None
        self.retries_left -= 1
        self.wait_left -= error.retry_after_s
        return error.retry_after_s

    def reset(self) -> None:
        """The call made progress (a stream delivered something): the next refusal gets a fresh budget."""
        self.retries_left = max(self.policy.attempts - 1, 0)
        self.wait_left = self.policy.max_wait_s
