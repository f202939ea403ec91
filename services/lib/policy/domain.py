"""Plain values the policy service's domain code works on (no gRPC types).

`Phase` is also the runtime's (services/runtime/phases.py); its table to and from the
proto's cogmesh.policy.v1.Phase is here, the only one.

`Scope` says where a decision happens, `TurnContext` what the runtime knows about
the turn, `Notice` is something the client should see (the servicer turns it into
a status or native_notice event).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cogmesh.policy.v1 import policy_pb2


class Phase(enum.Enum):
    """The seven points of the agent loop where interceptors run."""

    PRE_RUN = "pre_run"
    PRE_THINK = "pre_think"
    POST_THINK = "post_think"
    PRE_ACT = "pre_act"
    POST_ACT = "post_act"
    POST_RUN = "post_run"
    ON_ERROR = "on_error"


# The one table between this enum and the proto's (services/runtime uses it too).
PHASE_TO_PROTO: Mapping[Phase, policy_pb2.Phase] = {
    Phase.PRE_RUN: policy_pb2.PHASE_PRE_RUN,
    Phase.PRE_THINK: policy_pb2.PHASE_PRE_THINK,
    Phase.POST_THINK: policy_pb2.PHASE_POST_THINK,
    Phase.PRE_ACT: policy_pb2.PHASE_PRE_ACT,
    Phase.POST_ACT: policy_pb2.PHASE_POST_ACT,
    Phase.POST_RUN: policy_pb2.PHASE_POST_RUN,
    Phase.ON_ERROR: policy_pb2.PHASE_ON_ERROR,
}
# PHASE_UNSPECIFIED (and a value a newer peer sends) is missing: callers refuse or skip it.
PHASE_FROM_PROTO: Mapping[policy_pb2.Phase, Phase] = {value: phase for phase, value in PHASE_TO_PROTO.items()}


@dataclass(frozen=True, slots=True)
class Scope:
    agent: str
    tenant_id: str = ""
    session_id: str = ""
    turn_id: str = ""
    role_id: str = ""
    active_skill_ids: frozenset[str] = frozenset()
    # The session's scope (end user, project...), as the application set it at CreateSession.
    session_scope: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCallRef:
    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Msg:
    """One conversation message; roles are "user", "assistant", "system", "tool"."""

    role: str
    content: str
    tool_calls: tuple[ToolCallRef, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    turn_id: str = ""

    def with_content(self, content: str) -> Msg:
        return Msg(self.role, content, self.tool_calls, self.tool_call_id, self.name, self.turn_id)


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str
    description: str = ""


ModelFailureKind = Literal["rate_limit", "timeout", "context_length", "error"]
MODEL_FAILURE_KINDS: tuple[ModelFailureKind, ...] = ("rate_limit", "timeout", "context_length", "error")


@dataclass(frozen=True, slots=True)
class ModelFailure:
    kind: ModelFailureKind
    message: str = ""


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the client should see. "status" becomes a status event (denials,
    refusals), "notice" a native_notice event with `metadata` (hook failures,
    masking, budget warnings, failover), "compacted" a context_compacted event
    (metadata summary_tokens and archived_count)."""

    kind: Literal["status", "notice", "compacted"]
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class TurnContext:
    """What the runtime knows about the turn, as the interceptors of a phase see it.

    The chain mutates it: each interceptor sees what the ones before it changed.
    """

    scope: Scope
    task: str = ""
    messages: list[Msg] = field(default_factory=list)
    message_count: int = 0
    system_prompt: str = ""
    tools: list[ToolInfo] = field(default_factory=list)
    model: str = ""
    model_calls: int = 0
    tool_calls: int = 0
    mcp_calls: int = 0
    run_context: dict[str, Any] = field(default_factory=dict)
    # Interceptor state carried by the runtime from one policy call of the turn to the next.
    state: dict[str, Any] = field(default_factory=dict)
    is_subagent: bool = False
    # Phase-specific inputs.
    tool_name: str = ""
    tool_call_id: str = ""
    tool_args: dict[str, Any] = field(default_factory=dict)
    tool_result: str = ""
    tool_error: str | None = None  # the error text when the tool failed
    model_response: Msg | None = None
    error: ModelFailure | None = None
    final_text: str = ""
    notices: list[Notice] = field(default_factory=list)

    @property
    def conversation_length(self) -> int:
        """Messages so far: the list when the runtime sent it, else its count."""
        return max(len(self.messages), self.message_count)

    def notify(self, text: str, **metadata: Any) -> None:
        self.notices.append(Notice("notice", text, metadata))

    def status(self, text: str, **metadata: Any) -> None:
        self.notices.append(Notice("status", text, metadata))
