"""Suite configuration: environment (COGMESH_*) first, command-line flags override."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

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
    """One settings model for the whole suite; each service reads the fields it needs."""

    # Inputs stay out of error messages: a Redis URL may carry a password.
    model_config = SettingsConfigDict(env_prefix="COGMESH_", extra="ignore", hide_input_in_errors=True)

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
    tracing: bool = Field(True, description="record OpenTelemetry spans (trace ids in logs; exported to otlp_endpoint)")
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
    runtime_workers: int = Field(
        0, ge=0, description="runtime processes `cogmesh up` runs, each on its own port; 0: one per core, at least 2"
    )
    replicas: int = Field(
        1, ge=1, description="processes of every other service `cogmesh up` runs; above 1 needs redis_url"
    )

    call_timeout_s: float = Field(5.0, gt=0, description="deadline of internal unary calls, seconds")
    max_message_bytes: int = Field(
        64 << 20,
        ge=4 << 20,
        description="largest gRPC message a service takes from another one (tool results, journals, long "
        "replies); the gateway's public port keeps gRPC's 4 MiB for what clients send",
    )
    tool_result_limit_tokens: int = Field(
        25_000,
        ge=100,
        description="tool results over this many tokens (4 characters a token) are archived and the model gets "
        "their head behind a marker it pages through; an agent's config.tool_token_limit_before_evict overrides it",
    )
    turn_timeout_s: float = Field(300.0, gt=0, description="deadline of a whole turn, seconds")
    shutdown_grace_s: float = Field(5.0, ge=0, description="seconds in-flight RPCs get to finish on shutdown")
    heartbeat_s: float = Field(15.0, gt=0, description="idle seconds before a Subscribe heartbeat")

    agents_dir: Path | None = Field(None, description="folder of agent YAML files; default: the shipped agents")
    models_file: Path | None = Field(None, description="model catalogue YAML; default: the shipped models.yaml")
    models_store_file: Path | None = Field(
        None, description="YAML file where AddModel persists models when redis_url is empty; default: not persisted"
    )
    models_strict: bool = Field(False, description="unknown model names are NOT_FOUND instead of the default model")
    models_refresh_s: float = Field(
        1.0, ge=0, description="seconds between checks of the catalogue file and store for changes; 0: every call"
    )
    local_reply_tokens: int | None = Field(
        None,
        ge=1,
        description="the built-in local model answers plain messages with exactly this many tokens, "
        "one delta each (benchmarks); default: its echo",
    )
    local_delay_ms: float = Field(
        0.0, ge=0, description="the built-in local model waits this long before each chunk: a slow model, for tests"
    )
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
    subscriber_stall_s: float = Field(
        10.0, gt=0, description="seconds a subscriber may take no message before it is ended with RESOURCE_EXHAUSTED"
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
    takeover_poll_s: float = Field(
        1.0,
        gt=0,
        description="seconds between a runtime replica's looks for turns to take over (their runtime stopped)",
    )
    max_takeovers: int = Field(
        3, ge=0, description="takeovers a turn gets; a turn whose runtime keeps stopping then ends with an error"
    )
    runtime_max_turns: int = Field(
        0,
        ge=0,
        description="turns one runtime worker runs at once; past it StartTurn is refused (RESOURCE_EXHAUSTED) and "
        "the gateway tries another worker. 0: no fixed limit (a worker refuses turns anyway while its lease "
        "renewals or its event loop run late: services/runtime/admission.py)",
    )
    journal_steps: bool = Field(
        True,
        description="record each step of a turn in its journal; false only to measure what the journal costs "
        "(bench.journal): a turn taken over then starts again from its request, its tools run again",
    )
    handover_grace_s: float = Field(
        2.0,
        ge=0,
        description="on shutdown, seconds a running turn gets to reach its next recorded step before it is "
        "handed over to another runtime replica where it stands",
    )
    delta_flush_ms: float = Field(
        100.0,
        ge=0,
        description="a running turn appends assistant deltas to the event log at most this often (the first "
        "delta after a pause, and every other event, at once); 0: each delta at once",
    )
    advertise_host: str = Field(
        "",
        description="host other replicas reach this one at (its pod IP on Kubernetes); empty: the listen host, "
        "or this machine's name when listening on every interface",
    )
    event_log_outage_s: float = Field(
        10.0,
        gt=0,
        description="seconds a running turn waits for an unreachable event log (Redis) before it ends "
        "with a retryable error",
    )
    tenant_id: str = Field("default", description="tenant of unauthenticated (dev mode) callers")
    policy_dir: Path | None = Field(
        None, description="folder of policy.yaml, interceptors.yaml, role_router.yaml; default: the shipped policy"
    )
    policy_reload_s: float = Field(1.0, gt=0, description="seconds between checks of the policy files for changes")

    runtime: str = Field("", description="runtime engine when neither the turn nor the agent names one")
    providers_file: Path | None = Field(None, description="YAML of model provider endpoints and key sources")
    tool_servers_file: Path | None = Field(None, description="YAML of MCP and ToolService tool servers")

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
    session_ttl_s: float = Field(86_400.0, ge=0, description="idle seconds before a session is evicted; 0: never")
    # Webhooks (docs/webhooks.md), delivered by the sessions service.
    webhook_allow_private_targets: bool = Field(
        False, description="let webhooks target private, loopback and link-local addresses (refused: SSRF)"
    )
    webhook_secrets_key_file: Path | None = Field(
        None, description="32 random bytes in base64 that seal webhook secrets at rest; required with redis_url"
    )
    webhook_timeout_s: float = Field(10.0, gt=0, description="seconds one webhook POST may take")
    webhook_retry_first_s: float = Field(1.0, gt=0, description="delay before a failed webhook's first retry")
    webhook_retry_max_s: float = Field(3600.0, gt=0, description="longest delay between webhook retries")
    webhook_retry_window_s: float = Field(
        86_400.0, gt=0, description="seconds a webhook delivery is retried before it is dead"
    )
    webhook_poll_s: float = Field(
        1.0,
        gt=0,
        description="seconds between a sessions replica's checks of its clock against its next look for due "
        "deliveries (no Redis call); also the retry after a failed look",
    )

    memory_ttl_s: float = Field(0.0, ge=0, description="seconds a memory lives when its put names no TTL; 0: forever")
    memory_max_items: int = Field(10_000, gt=0, description="memories one namespace may hold")
    memory_max_bytes: int = Field(
        32 * 2**20, gt=0, description="bytes (values, texts, embeddings) one namespace may hold"
    )
    memory_max_value_bytes: int = Field(64 * 2**10, gt=0, description="bytes of one memory's value and text together")
    memory_embedding_model: str = Field(
        "", description="embedding model for vector search, e.g. text-embedding-3-small; empty: BM25 only"
    )
    memory_embedding_provider: str = Field(
        "openai", description="provider (of providers_file) serving memory_embedding_model; an OpenAI-compatible one"
    )
    memory_cache_items: int = Field(
        1_000_000, gt=0, description="memories a memory replica keeps indexed from Redis (least recently used go first)"
    )

    api_keys_file: Path | None = Field(None, description="YAML of hashed API keys -> tenant; enables auth")
    dev_mode: bool = Field(False, description="no auth: every caller is tenant_id; loopback only")
    tenant_rate_per_s: float = Field(200.0, gt=0, description="requests per second per tenant at the gateway")
    tenant_burst: int = Field(400, gt=0, description="burst of requests per tenant at the gateway")
    tenant_max_streams: int = Field(500, gt=0, description="concurrent streams per tenant at the gateway")
    tls_cert_file: Path | None = Field(None, description="PEM certificate: the gateway serves TLS")
    tls_key_file: Path | None = Field(None, description="PEM private key for tls_cert_file")
    tls_client_ca_file: Path | None = Field(None, description="PEM CA bundle: require client certificates (mTLS)")
    a2a_url: str = Field("", description="address the A2A agent card advertises; empty: the gateway's listen address")
    web_addr: str = Field(
        f"127.0.0.1:{DEFAULT_PORTS['web']}",
        description="HTTP address of the browser edge (Connect, gRPC-Web and the web console)",
    )
    web_cors_origins: str = Field(
        "",
        description="comma-separated origins (https://app.example.com) whose pages may call the browser edge, "
        "or *; empty: the edge's own pages only",
    )
    web_console_dir: Path | None = Field(
        None, description="folder of the built web console; default: gateway/web/console/dist (`make console`)"
    )
    scheduler_tick_s: float = Field(
        1.0,
        gt=0,
        description="seconds between a gateway scheduler's checks of its clock against its next look at the store "
        "(no store call); it looks when a schedule fires or a run's lease lapses, and at least every "
        "min(lease, grace / 2)",
    )
    scheduler_lease_s: float = Field(
        30.0, gt=0, description="seconds a gateway holds a schedule run unrenewed before another replica takes it over"
    )
    scheduler_grace_s: float = Field(
        60.0, ge=0, description="seconds after its time a schedule's tick still counts as on time, not missed"
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


def load_settings(argv: Sequence[str] | None = None, *, prog: str = "cogmesh") -> Settings:
    """Build Settings from the environment, then apply `--field-name value` flags."""
    parser = argparse.ArgumentParser(prog=prog, description="Environment variables COGMESH_<FIELD> set defaults.")
    for name, field in Settings.model_fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help=field.description)
    flags = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    return Settings(**flags)
