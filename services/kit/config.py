"""Configuration: environment (COGMESH_*) first, command-line flags override.

`Settings` holds what every process reads alike (where to listen and where the others are,
logs, traces, metrics, connections, deadlines, Redis, turn leases, the event log). Each service
owns its other knobs in a subclass in its own package (services/<name>/settings.py,
gateway/settings.py), so its `--help` lists only what it reads and mypy refuses a read of
another service's field; services/suite/settings.py combines them all for the processes that
run the whole suite. docs/settings.md (tools/settingsdoc.py) lists every field by owner.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.kit import addresses
from services.kit.redis_url import check_prefix, parse_redis_url

# Default port of each service (DESIGN.md). Internal services bind loopback by default.
DEFAULT_PORTS: dict[str, int] = {
    "gateway": 50051,
    "runtime": 50052,
    "policy": 50053,
    "context": 50054,
    "sessions": 50055,
    "models": 50056,
    "memory": 50057,
    "web": 50050,  # the browser edge (gateway/web): HTTP, not gRPC
}


# Every internal address may name several replicas (services/kit/addresses.py).
_ADDRESS_FORMS = ": host:port, a list of replicas ip:port,ip:port, or dns:///name:port"


class Settings(BaseSettings):
    """The settings every service shares; a field goes here only if it means the same thing to all its readers."""

    # Inputs stay out of error messages: a Redis URL may carry a password. Environment variables of
    # other services' fields are not read; a field of another class given in code is an error.
    model_config = SettingsConfigDict(env_prefix="COGMESH_", extra="forbid", hide_input_in_errors=True)

    listen: str = Field("", description="host:port to bind; empty means 127.0.0.1:<service default port>")
    gateway_addr: str = Field(f"127.0.0.1:{DEFAULT_PORTS['gateway']}", description="gateway address")
    runtime_addr: str = Field(f"127.0.0.1:{DEFAULT_PORTS['runtime']}", description="runtime service" + _ADDRESS_FORMS)
    policy_addr: str = Field(f"127.0.0.1:{DEFAULT_PORTS['policy']}", description="policy service" + _ADDRESS_FORMS)
    context_addr: str = Field(f"127.0.0.1:{DEFAULT_PORTS['context']}", description="context service" + _ADDRESS_FORMS)
    sessions_addr: str = Field(
        f"127.0.0.1:{DEFAULT_PORTS['sessions']}", description="sessions service" + _ADDRESS_FORMS
    )
    models_addr: str = Field(f"127.0.0.1:{DEFAULT_PORTS['models']}", description="models service" + _ADDRESS_FORMS)
    memory_addr: str = Field(f"127.0.0.1:{DEFAULT_PORTS['memory']}", description="memory service" + _ADDRESS_FORMS)

    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")
    log_format: Literal["json", "console"] = Field("json", description="log line format")
    otlp_endpoint: str = Field("", description="OTLP/gRPC endpoint for traces; empty exports nothing")
    tracing: bool = Field(
        True,
        description="OpenTelemetry spans: trace ids in logs and calls; spans recorded and exported when "
        "otlp_endpoint is set",
    )
    trace_sample_ratio: float = Field(1.0, ge=0, le=1, description="share of new traces recorded (parent decides)")
    genai_capture_content: bool = Field(
        False,
        description="put prompts, completions, tool arguments and tool results on the runtime's GenAI spans "
        "(docs/observability.md); off: only models, tokens, cost, timings and errors",
    )
    metrics: bool = Field(True, description="record Prometheus metrics (RPC latency, streams, turns, tokens, cost)")
    metrics_port: int = Field(0, ge=0, le=65535, description="port of the Prometheus /metrics endpoint; 0: not served")
    metrics_host: str = Field("127.0.0.1", description="bind address of /metrics (0.0.0.0 in containers)")
    log_sensitive: bool = Field(
        False, description="debug only: log prompt and message text; secrets (keys, tokens) stay redacted"
    )
    drain_s: float = Field(
        0.0, ge=0, description="on shutdown, seconds NOT_SERVING is reported before new RPCs are refused"
    )

    keepalive_time_s: float = Field(
        30.0, gt=0, description="seconds between HTTP/2 keepalive pings, from clients and servers alike"
    )
    keepalive_timeout_s: float = Field(
        10.0, gt=0, description="seconds a keepalive ping may wait for its answer before the connection is dropped"
    )
    max_connection_age_s: float = Field(
        300.0,
        ge=0,
        description="servers close each connection after this long (+-10% jitter), so clients reconnect and "
        "spread over replicas that came up meanwhile; 0: never",
    )
    max_connection_age_grace_s: float = Field(
        30.0,
        ge=0,
        description="then its calls get this long before they are cut (every stream resumes: by seq, or is "
        "opened again)",
    )

    call_timeout_s: float = Field(5.0, gt=0, description="deadline of internal unary calls, seconds")
    max_message_bytes: int = Field(
        64 << 20,
        ge=4 << 20,
        description="largest gRPC message a service takes from another one (tool results, journals, long "
        "replies); the gateway's public port keeps gRPC's 4 MiB for what clients send",
    )
    turn_timeout_s: float = Field(300.0, gt=0, description="deadline of a whole turn, seconds")
    shutdown_grace_s: float = Field(5.0, ge=0, description="seconds in-flight RPCs get to finish on shutdown")

    # Read alike by several services: one folder of agents, one providers file, one way to count tokens
    # (the runtime builds prompts with the context service's code), one event log, one turn lease.
    agents_dir: Path | None = Field(None, description="folder of agent YAML files; default: the shipped agents")
    token_counter: Literal["tiktoken", "script", "chars"] = Field(
        "tiktoken", description="context token counter: tiktoken (cl100k_base), script (estimate) or chars (len/4)"
    )
    event_retention: int = Field(10_000, gt=0, description="events kept per session in the event log")
    subscriber_max_lag: int = Field(5_000, gt=0, description="events a subscriber may fall behind before cut-off")
    fanout_messages_per_s: float = Field(
        5_000,
        ge=0,
        description="messages a second to all subscribers of one session together: token deltas that come "
        "faster are sent in batches (0: every event at once)",
    )
    turn_lease_ttl_s: int = Field(
        6,
        ge=2,
        description="seconds a turn's lease outlives its runtime: another runtime replica takes the turn over "
        "this long after the one running it stopped",
    )
    turn_lease_renew_s: float = Field(
        2.0, gt=0, description="seconds between lease renewals of a running turn (how fast an INTERRUPT reaches it)"
    )
    advertise_host: str = Field(
        "",
        description="host other replicas reach this one at (its pod IP on Kubernetes); empty: the listen host, "
        "or this machine's name when listening on every interface",
    )
    providers_file: Path | None = Field(None, description="YAML of model provider endpoints and key sources")

    redis_url: str = Field(
        "",
        description="Redis of sessions, leases, checkpoints, event log, memories: redis://host:port/db, "
        "redis+sentinel://host:port[,host:port...]/service, or redis+cluster://host:port[,host:port...]; "
        "empty: in process",
    )
    redis_key_prefix: str = Field("cogmesh:", description="prefix of every Redis key the suite writes (no braces)")
    redis_timeout_s: float = Field(2.0, gt=0, description="socket timeout of each Redis call, seconds")
    redis_wait_replicas: int = Field(
        0,
        ge=0,
        description="after each write of a session (messages, lease, checkpoints, events), wait until this many "
        "replicas have it (Redis WAIT), so a failover cannot lose it; 0: acknowledged once the primary has it",
    )
    redis_wait_timeout_ms: int = Field(
        1000,
        gt=0,
        description="longest wait for redis_wait_replicas; past it the write fails as UNAVAILABLE (retryable), "
        "though the primary has it",
    )

    @field_validator("runtime_addr", "policy_addr", "context_addr", "sessions_addr", "models_addr", "memory_addr")
    @classmethod
    def _dialable(cls, value: str) -> str:
        addresses.replicas(value)  # ValueError names the problem; pydantic names the field
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_form(cls, url: str) -> str:
        if url:
            parse_redis_url(url)  # raises ValueError naming what is wrong
        return url

    @field_validator("redis_key_prefix")
    @classmethod
    def _prefix_without_braces(cls, prefix: str) -> str:
        return check_prefix(prefix)

    @model_validator(mode="after")
    def _renew_before_expiry(self) -> Settings:
        if self.turn_lease_renew_s >= self.turn_lease_ttl_s:
            raise ValueError(
                f"turn_lease_renew_s ({self.turn_lease_renew_s}) must be below turn_lease_ttl_s "
                f"({self.turn_lease_ttl_s}), or running turns lose their lease"
            )
        return self

    def listen_address(self, service: str) -> str:
        return self.listen or f"127.0.0.1:{DEFAULT_PORTS[service]}"

    def advertise_address(self, listen: str, port: int) -> str:
        """host:port other replicas reach this process at, once it is bound to `port`."""
        host = self.advertise_host or listen.rsplit(":", 1)[0].strip("[]")
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


S = TypeVar("S", bound=Settings)


def declared_fields(cls: type[Settings]) -> list[str]:
    """The fields `cls` itself declares, in order (not those it inherits): what that class owns."""
    return [name for name in vars(cls).get("__annotations__", {}) if name in cls.model_fields]


def settings_parser(cls: type[Settings], prog: str = "cogmesh") -> argparse.ArgumentParser:
    """A `--field-name value` flag for each field of `cls`: a service's own and the shared ones."""
    parser = argparse.ArgumentParser(prog=prog, description="Environment variables COGMESH_<FIELD> set defaults.")
    for name, field in cls.model_fields.items():
        # argparse formats help with %: a literal one ("+-10% jitter") must be doubled.
        help_text = (field.description or "").replace("%", "%%")
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help=help_text)
    return parser


def load_settings(cls: type[S], argv: Sequence[str] | None = None, *, prog: str = "cogmesh") -> S:
    """Build `cls` from the environment, then apply its flags from `argv`."""
    flags = {k: v for k, v in vars(settings_parser(cls, prog).parse_args(argv)).items() if v is not None}
    return cls(**flags)
