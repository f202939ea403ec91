"""How a tool call is retried when its server could not answer, and how long one attempt may take.

A tool server's file entry sets `retries`, `timeout_s`, `backoff` and `base_delay_s` for
all its tools; `tool_overrides` changes any of them for one tool (a payment call that must
not be repeated gets `retries: 0`, a slow report a longer `timeout_s`). Only failures to
reach the server are retried (`ToolUnavailable`); a timeout never is, since the call may
have had effects.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from services.kit.logging import log

BackoffStrategy: TypeAlias = Literal["exponential", "linear", "fixed"]


@dataclass(frozen=True)
class Backoff:
    """The wait between attempts: `base_delay_s` (None: the runtime's default) times 2^(n-1), n, or 1."""

    strategy: BackoffStrategy = "exponential"
    base_delay_s: float | None = None

    def delay_s(self, attempt: int, default_base_s: float) -> float:
        """The wait after failed attempt `attempt` (1-based), jittered to between half and all of it so
        callers that failed together do not retry together."""
        base = default_base_s if self.base_delay_s is None else self.base_delay_s
        steps = 2 ** (attempt - 1) if self.strategy == "exponential" else attempt if self.strategy == "linear" else 1
        return float(base * steps * (0.5 + random.random() / 2))


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True)
class CallSettings:
    """One tool's retries, per-attempt timeout (None: the turn's tool timeout) and backoff."""

    retries: int = 1
    timeout_s: float | None = None
    backoff: Backoff = DEFAULT_BACKOFF


def unknown_overrides(server: str, overrides: Mapping[str, CallSettings], listed: Sequence[str]) -> None:
    """Say in the log which of a server's `tool_overrides` name no tool it lists (a typo applies nowhere)."""
    missing = sorted(set(overrides) - set(listed))
    if missing:
        log.warning("tool_overrides name tools the server does not list", server=server, tools=missing)
