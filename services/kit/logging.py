"""structlog setup: one JSON line per event, with service, trace and request ids.

Every line carries `service`, and inside an RPC or a turn `trace_id`, `span_id`,
`tenant`, `session_id` and `turn_id` (the server interceptor binds them from the
request; `bind_request` adds more). Lines from other libraries (stdlib `logging`)
go through the same processors, so they are JSON with the same ids.

Two things never reach a log line:

* secrets: values under secret-looking keys (`api_key`, `authorization`, ...),
  bearer tokens and provider-style keys inside any string, and the values of
  secret environment variables (`*_API_KEY`, `*_TOKEN`, ...) or of secrets
  registered with `register_secret` (keys read from files) wherever they appear;
* prompt text: values under message-text keys (`content`, `prompt`, ...) are
  replaced by their length, unless `log_sensitive` (a debug setting) is on.
  Secrets stay redacted even then.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO

import structlog
from opentelemetry import trace

from services.kit.config import Settings

REDACTED = "[redacted]"
# Keys whose values are secrets, compared lower-case with "-" read as "_".
SECRET_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "x_api_key",
        "authorization",
        "proxy_authorization",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "bearer",
        "private_key",
        "credentials",
        "cookie",
        "set_cookie",
    }
)
_SECRET_SUFFIXES = ("_api_key", "_secret", "_password", "_access_token", "_private_key")
# Keys whose values are what users and models wrote: logged only with log_sensitive.
TEXT_KEYS = frozenset(
    {
        "content",
        "prompt",
        "system_prompt",
        "user_text",
        "text",
        "message_text",
        "messages",
        "history",
        "arguments",
        "args",
        "result",
        "result_summary",
        "partial_text",
        "task",
        "query",
        "completion",
        "delta",
        "output",
        "structured_output",
        "body",
        "request_body",
        "response_body",
    }
)
# Secrets recognisable by shape, inside any string.
_SECRET_PATTERN = re.compile(
    r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+"  # HTTP/gRPC authorization values
    r"|\bcm_[A-Za-z0-9_-]{20,}"  # cogmesh API keys (`cogmesh keys new`)
    r"|\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}"  # OpenAI/Anthropic/DeepSeek style keys
    r"|\bAIza[0-9A-Za-z_-]{20,}"  # Google API keys
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
)
# Passwords in URLs (redis://user:password@host).
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")
# Environment variables whose values are secrets wherever they show up.
_SECRET_ENV = re.compile(r"(?i)(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$")
_MIN_SECRET_LEN = 8  # shorter values would redact ordinary words


def _is_secret_key(key: str) -> bool:
    name = key.lower().replace("-", "_")
    return name in SECRET_KEYS or name.endswith(_SECRET_SUFFIXES)


class Redactor:
    """A structlog processor that removes secrets, and prompt text unless allowed."""

    def __init__(self, log_sensitive: bool = False, secrets: Iterable[str] = ()) -> None:
        self.log_sensitive = log_sensitive
        self._secrets: set[str] = set()
        self._literal: re.Pattern[str] | None = None
        for value in secrets:
            self.add_secret(value)

    def add_secret(self, value: str) -> None:
        value = value.strip()
        if len(value) < _MIN_SECRET_LEN or value in self._secrets:
            return
        self._secrets.add(value)
        # Longest first, so a secret that contains another is removed whole.
        ordered = sorted(self._secrets, key=len, reverse=True)
        self._literal = re.compile("|".join(re.escape(s) for s in ordered))

    def scrub(self, text: str) -> str:
        """`text` with every recognisable secret replaced."""
        if self._literal is not None:
            text = self._literal.sub(REDACTED, text)
        text = _URL_PASSWORD.sub(rf"\1{REDACTED}@", text)
        return _SECRET_PATTERN.sub(REDACTED, text)

    def _value(self, key: str | None, value: Any, depth: int) -> Any:
        if key is not None:
            if _is_secret_key(key):
                return REDACTED
            if not self.log_sensitive and key.lower() in TEXT_KEYS:
                return _hidden_text(value)
        if isinstance(value, str):
            return self.scrub(value)
        if depth >= 4:
            return value if isinstance(value, int | float | bool) or value is None else REDACTED
        if isinstance(value, dict):
            return {k: self._value(str(k), v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple):
            # (name, value) pairs, as gRPC metadata and HTTP headers come, are judged by name.
            if all(isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) for item in value):
                return [(name, self._value(name, item, depth + 1)) for name, item in value]
            return [self._value(None, item, depth + 1) for item in value]
        return value

    def __call__(self, _: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if key == "event":  # the message itself: never hidden, but scrubbed
                event[key] = self.scrub(value) if isinstance(value, str) else value
            else:
                event[key] = self._value(key, value, 0)
        return event


def _hidden_text(value: Any) -> str:
    size = len(value) if isinstance(value, str | list | tuple | dict) else 1
    unit = "chars" if isinstance(value, str) else "items"
    return f"[hidden: {size} {unit}; log_sensitive shows it]"


_redactor = Redactor()


def register_secret(value: str) -> None:
    """Never log `value` (e.g. a provider key read from a file), wherever it appears."""
    _redactor.add_secret(value)


def secret_env_values(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Values of environment variables named like secrets (OPENAI_API_KEY, *_TOKEN, ...)."""
    env = os.environ if environ is None else environ
    return [value for name, value in env.items() if _SECRET_ENV.search(name) and len(value.strip()) >= 8]


def _add_trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event["trace_id"] = format(ctx.trace_id, "032x")
        event["span_id"] = format(ctx.span_id, "016x")
    return event


_debug = False


def debug_enabled() -> bool:
    """Whether debug lines are written (lets hot paths skip building them)."""
    return _debug


def configure_logging(service: str, settings: Settings, stream: TextIO | None = None) -> None:
    """Log JSON (or console) lines of `service` to `stream` (stderr by default)."""
    global _debug
    out = stream or sys.stderr
    level = getattr(logging, settings.log_level.upper())
    _debug = level <= logging.DEBUG
    _redactor.log_sensitive = settings.log_sensitive
    for value in secret_env_values():
        _redactor.add_secret(value)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,  # service, tenant, session_id, turn_id bound per request
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_trace_ids,
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, _redactor, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        # Not cached: reconfiguring (tests, a second service in one process) must reach every logger.
        cache_logger_on_first_use=False,
    )
    # Other libraries' stdlib logging: the same ids, the same redaction, one JSON line each.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder(), structlog.processors.format_exc_info],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _redactor, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    # HTTP client libraries log URLs (a line per request at INFO), and at debug level headers: only with
    # log_sensitive. httpx2 and httpcore2 are the forks the openai and anthropic SDKs ship with.
    for name in ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "anthropic", "google_genai", "urllib3"):
        logging.getLogger(name).setLevel(level if settings.log_sensitive else max(level, logging.WARNING))
    logging.getLogger("grpc").setLevel(max(level, logging.INFO))  # its debug lines are per-loop noise
    structlog.contextvars.bind_contextvars(service=service)


def bind_request(**ids: str) -> None:
    """Attach request ids (session_id, turn_id, tenant) to every log line of this task."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in ids.items() if v})


log = structlog.get_logger()
