"""Provider-neutral vocabulary of the agent loop: messages, tool schemas, stream chunks.

Every model backend (the built-in local model, OpenAI-compatible, Anthropic, Google)
implements `ChatModel` and translates between these types and its own wire format, so
the loop never sees provider details. All values are immutable; mappings inside them
(tool arguments, JSON schemas) are plain JSON-ready data that must be treated as
read-only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A model's request to run one tool; `id` pairs it with the tool's result message.

    `arguments_error` is set when the model's arguments were not a JSON object (the
    loop then answers the call with that error instead of running the tool).
    """

    id: str
    name: str
    arguments: Mapping[str, Any]
    arguments_error: str = ""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One conversation turn.

    An assistant message may carry `tool_calls`; a "tool" message carries one tool's
    result in `content`, the `tool_call_id` it answers and the tool's `name`.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool offered to the model; `parameters` is a JSON Schema object."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TextDelta:
    """The next piece of the assistant's text; the full text is the concatenation."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallChunk:
    """One complete tool call (providers assemble streamed argument fragments first)."""

    call: ToolCallRequest


@dataclass(frozen=True, slots=True)
class UsageChunk:
    """Token usage of the whole model call."""

    input_tokens: int
    output_tokens: int


ModelChunk: TypeAlias = TextDelta | ToolCallChunk | UsageChunk


class ChatModel(Protocol):
    """A streaming chat model.

    `stream` is an async generator: it yields text deltas and tool calls in the order
    the model produced them and ends with one `UsageChunk` when the backend reports
    usage. Failures are raised as `ModelError`. Cancelling the consuming task (or
    closing the generator) must stop the call promptly.
    """

    name: str

    def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        """Stream the model's next assistant turn for `messages`, offering `tools`."""
        ...


ModelErrorKind: TypeAlias = Literal[
    "provider_error", "rate_limited", "timeout", "context_length", "invalid_request", "authentication"
]


class ModelError(Exception):
    """A failed model call.

    `kind` classifies the failure; `retryable` tells the loop whether the same call may
    succeed if repeated, and `retry_after_s` how long the provider asked to wait first.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind = "provider_error",
        retryable: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.retryable = retryable
        self.retry_after_s = retry_after_s
