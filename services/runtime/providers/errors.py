"""Turn whatever a provider SDK raises into a classified `ModelError`.

The three SDKs raise different exception families (openai/anthropic `APIStatusError`
and friends, google-genai `APIError`, bare httpx2 transport errors, JSON decoding
errors on a malformed chunk). The loop needs only: what kind of failure, may the same
call succeed if repeated, and how long the provider asked us to wait.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx2
import pydantic

from services.lib.llm import ModelError

try:  # google-genai streams over aiohttp instead of httpx whenever aiohttp is installed
    import aiohttp

    _AIOHTTP_TRANSPORT: tuple[type[BaseException], ...] = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
except ImportError:  # pragma: no cover - aiohttp is optional
    _AIOHTTP_TRANSPORT = ()

# Phrases providers use when the prompt does not fit the context window.
_CONTEXT_LENGTH_HINTS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "maximum number of tokens",
    "input token count",
)
_MAX_RETRY_AFTER_S = 3600.0


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from retry-after-ms / retry-after (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        if "retry-after-ms" in lowered:
            return min(max(float(lowered["retry-after-ms"]) / 1000, 0.0), _MAX_RETRY_AFTER_S)
        value = lowered.get("retry-after")
        if value is None:
            return None
        try:
            return min(max(float(value), 0.0), _MAX_RETRY_AFTER_S)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return min(max(when.timestamp() - time.time(), 0.0), _MAX_RETRY_AFTER_S)
    except (TypeError, ValueError, OverflowError):
        return None


def from_status(
    provider: str, status: int, message: str, headers: Mapping[str, str] | None, error_type: str = ""
) -> ModelError:
    """Classify an HTTP error answer (or an in-stream error event) of a provider."""
    text = f"{provider} returned HTTP {status}: {message}" if status else f"{provider} stream error: {message}"
    lowered = f"{error_type} {message}".lower()
    wait = retry_after_s(headers)
    if status == 429 or error_type in ("rate_limit_error", "RESOURCE_EXHAUSTED", "rate_limit_exceeded"):
        return ModelError(text, kind="rate_limited", retryable=True, retry_after_s=wait)
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return ModelError(text, kind="authentication", retryable=False)
    if any(hint in lowered for hint in _CONTEXT_LENGTH_HINTS):
        return ModelError(text, kind="context_length", retryable=False)
    if status == 408:
        return ModelError(text, kind="timeout", retryable=True, retry_after_s=wait)
    if status >= 500 or status == 409 or error_type in ("overloaded_error", "api_error"):
        return ModelError(text, kind="provider_error", retryable=True, retry_after_s=wait)
    return ModelError(text, kind="invalid_request", retryable=False)


def classify(provider: str, exc: BaseException) -> ModelError:
    """Map any exception from an SDK call or its stream onto a ModelError."""
    if isinstance(exc, ModelError):
        return exc
    status = getattr(exc, "status_code", None)
    if status is None and type(exc).__module__.startswith("google.genai"):
        status = getattr(exc, "code", None)
    response = getattr(exc, "response", None)
    if isinstance(status, int) and response is not None:
        headers = dict(getattr(response, "headers", {}) or {})
        message, error_type = _error_body(exc)
        # An error event inside a 200 stream (Anthropic "overloaded_error") has no HTTP error status.
        return from_status(provider, status if status >= 400 else 0, message, headers, error_type)
    name = type(exc).__name__
    refused = _aiohttp_connection_failure(exc)
    if refused is not None:
        return ModelError(f"connection to {provider} failed: {refused}", kind="provider_error", retryable=True)
    if isinstance(exc, httpx2.TimeoutException | TimeoutError) or name in ("APITimeoutError",):
        return ModelError(f"{provider} did not answer in time", kind="timeout", retryable=True)
    cause = exc.__cause__ or exc.__context__
    if name == "APIConnectionError" and isinstance(cause, httpx2.TimeoutException):
        return ModelError(f"{provider} did not answer in time", kind="timeout", retryable=True)
    if isinstance(exc, (httpx2.TransportError, *_AIOHTTP_TRANSPORT)) or name == "APIConnectionError":
        detail = str(cause or exc) or name
        return ModelError(f"connection to {provider} failed: {detail}", kind="provider_error", retryable=True)
    if isinstance(exc, json.JSONDecodeError | pydantic.ValidationError) or name == "UnknownApiResponseError":
        return ModelError(
            f"{provider} sent a malformed stream chunk: {_one_line(exc)}", kind="provider_error", retryable=True
        )
    if isinstance(exc, RecursionError):  # JSON nested ~1,000 levels (Gemini sends tool arguments parsed)
        return ModelError(
            f"{provider} sent a stream chunk nested too deep to parse", kind="provider_error", retryable=True
        )
    return ModelError(f"{provider} call failed: {name}: {_one_line(exc)}", kind="provider_error", retryable=False)


def _aiohttp_connection_failure(exc: BaseException) -> BaseException | None:
    """The aiohttp connection error (not a timeout) behind `exc`, if any.

    openai's aiohttp transport maps every aiohttp ClientConnectionError, a refused connection included, to
    httpx2's ConnectTimeout, which the SDK raises as APITimeoutError: the cause says what happened."""
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 8:
        if isinstance(cause, _AIOHTTP_TRANSPORT) and not isinstance(cause, TimeoutError):
            return cause
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return None


def _error_body(exc: BaseException) -> tuple[str, str]:
    """(message, error type) from an SDK error's parsed body, whatever its shape."""
    body: Any = getattr(exc, "body", None)
    if body is None:
        body = getattr(exc, "details", None)  # google-genai
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            message = str(inner.get("message") or getattr(exc, "message", "") or exc)
            error_type = str(inner.get("type") or inner.get("status") or inner.get("code") or "")
            return _one_line(message), error_type
    return _one_line(getattr(exc, "message", None) or exc), ""


def _one_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 300 else text[:299] + "…"
