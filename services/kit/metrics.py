"""Prometheus metrics of every cogmesh service, served on an HTTP /metrics port.

RPC metrics come from the server interceptor (server.py) for every service: latency
histograms by method and status, active streams, stream messages sent. The domain
metrics are read off the wire where the wire already says everything:

* events by payload kind: logged by the runtime's turns (TurnMeter: `grpc_method` is
  StartTurn, ContinueTurn or takeover) and delivered by the gateway's `SendMessage`/
  `Subscribe` streams; `rate()` gives events/s;
* turn latency by outcome, and tokens, cost and calls by model, from the events the
  runtime's turns log (each model call's `usage` event);
* policy denials by rule and deciding layer, from `CheckToolCall(s)` decisions;
* the OpenTelemetry GenAI client metrics of each model call, recorded by the runtime
  (services/runtime/genai_telemetry.py): `gen_ai.client.token.usage` and
  `gen_ai.client.operation.duration`, named and labelled as OpenTelemetry's Prometheus
  exporter translates them (dots to underscores, the unit `s` as `_seconds`, the
  annotation `{token}` dropped), with the conventions' bucket boundaries.

Circuit breakers live inside the policy and runtime processes; a service registers a
snapshot function with `register_breakers` and their states are read at scrape time.

Names follow Prometheus conventions (`_seconds`, `_total`, `_usd`); labels only take
bounded values (method names, status codes, model ids from the catalogue, rule names).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from google.protobuf.message import Message
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from cogmesh.common.v1 import events_pb2
from cogmesh.policy.v1 import policy_pb2

# From sub-millisecond unary calls to turns and streams of minutes.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TURN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
CIRCUIT_STATES = ("closed", "open", "half_open")

RPC_SECONDS = Histogram(
    "grpc_server_handling_seconds",
    "Time from the start of an RPC to its status, by method and status code (streams: the stream's lifetime).",
    ["grpc_service", "grpc_method", "grpc_type", "grpc_code"],
    buckets=LATENCY_BUCKETS,
)
RPC_ACTIVE_STREAMS = Gauge(
    "grpc_server_active_streams",
    "Streaming RPCs in progress, by method.",
    ["grpc_service", "grpc_method"],
)
RPC_MESSAGES_SENT = Counter(
    "grpc_server_msg_sent",
    "Messages sent on server streams, by method.",
    ["grpc_service", "grpc_method"],
)
EVENTS = Counter(
    "cogmesh_events",
    "Runtime events carried by server streams, by method and payload kind (rate() is events per second).",
    ["grpc_service", "grpc_method", "kind"],
)
TURN_SECONDS = Histogram(
    "cogmesh_turn_duration_seconds",
    "Runtime turn latency, from when a replica takes the turn to its final or error event, by outcome.",
    ["outcome"],
    buckets=TURN_BUCKETS,
)
MODEL_CALLS = Counter("cogmesh_model_calls", "Model calls, by model and provider.", ["model", "provider"])
MODEL_TOKENS = Counter(
    "cogmesh_model_tokens",
    "Tokens of model calls, by model, provider and direction (input or output).",
    ["model", "provider", "direction"],
)
MODEL_COST = Counter(
    "cogmesh_model_cost_usd", "Cost of model calls in USD from catalogue pricing, by model.", ["model", "provider"]
)
# The buckets OpenTelemetry's GenAI conventions give (gen-ai-metrics.md).
GENAI_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
GENAI_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
GENAI_TOKEN_USAGE = Histogram(
    "gen_ai_client_token_usage",
    "Number of input and output tokens used, per model call (OpenTelemetry gen_ai.client.token.usage).",
    [
        "gen_ai_operation_name",
        "gen_ai_provider_name",
        "gen_ai_token_type",
        "gen_ai_request_model",
        "gen_ai_response_model",
    ],
    buckets=GENAI_TOKEN_BUCKETS,
)
GENAI_OPERATION_DURATION = Histogram(
    "gen_ai_client_operation_duration_seconds",
    "GenAI operation duration, per model call (OpenTelemetry gen_ai.client.operation.duration); "
    "error_type is empty when the call succeeded.",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model", "error_type"],
    buckets=GENAI_DURATION_BUCKETS,
)
POLICY_DENIALS = Counter(
    "cogmesh_policy_denials",
    "Tool calls the policy service denied, by rule and by the layer that decided.",
    ["rule", "source"],
)

_DECISION_METHODS = frozenset(
    {"/cogmesh.policy.v1.PolicyService/CheckToolCall", "/cogmesh.policy.v1.PolicyService/CheckToolCalls"}
)
_EVENT_TYPE = events_pb2.RuntimeEvent.DESCRIPTOR.full_name
_ERROR_KINDS = {
    value.number: value.name.removeprefix("ERROR_KIND_").lower() for value in events_pb2.ErrorKind.DESCRIPTOR.values
}
_has_events: dict[type, bool] = {}


def _carries_events(message: Message) -> bool:
    """Whether the message type has a `repeated RuntimeEvent events` field (cached per type)."""
    kind = type(message)
    known = _has_events.get(kind)
    if known is None:
        field = message.DESCRIPTOR.fields_by_name.get("events")
        known = field is not None and field.message_type is not None and field.message_type.full_name == _EVENT_TYPE
        _has_events[kind] = known
    return known


def split_method(method: str) -> tuple[str, str]:
    """ "/pkg.Service/Method" -> ("pkg.Service", "Method")."""
    _, _, rest = method.partition("/")
    service, _, name = rest.partition("/")
    return service, name


# Labelled children, looked up once: `labels()` takes a lock and builds a key on every
# call, and a fan-out of one session to 100 subscribers counts ~100,000 events a second.
_sent_children: dict[tuple[str, str], Any] = {}
_event_children: dict[tuple[str, str, str], Any] = {}


def _messages_sent(labels: tuple[str, str]) -> Any:
    child = _sent_children.get(labels)
    if child is None:
        child = _sent_children[labels] = RPC_MESSAGES_SENT.labels(*labels)
    return child


def _events_of(labels: tuple[str, str], kind: str) -> Any:
    key = (*labels, kind)
    child = _event_children.get(key)
    if child is None:
        child = _event_children[key] = EVENTS.labels(*key)
    return child


class RpcRecorder:
    """Records one RPC: created when it starts, told each message it sends, ended once with its code."""

    __slots__ = ("_labels", "_method", "_sent", "_started", "_stream", "_type")

    def __init__(self, method: str, rpc_type: str) -> None:
        self._method = method
        self._labels = split_method(method)
        self._type = rpc_type
        self._stream = rpc_type in ("server_stream", "bidi_stream")
        self._started = time.perf_counter()
        self._sent = _messages_sent(self._labels)
        if self._stream:
            RPC_ACTIVE_STREAMS.labels(*self._labels).inc()

    def sent(self, message: Any) -> None:
        """A response message: counted on streams, and read for domain metrics."""
        if self._stream:
            self._sent.inc()
            if isinstance(message, Message) and _carries_events(message):
                self._events(message.events)  # type: ignore[attr-defined]
        elif self._method in _DECISION_METHODS:
            _decisions(message)

    def written(self, events: Iterable[events_pb2.RuntimeEvent]) -> None:
        """A message the handler wrote itself (context.write, maybe pre-encoded bytes) carrying `events`."""
        self._sent.inc()
        self._events(events)

    def _events(self, events: Iterable[events_pb2.RuntimeEvent]) -> None:
        # Delivery streams: one increment per kind, not per event.
        kinds: dict[str, int] = {}
        for event in events:
            kind = event.WhichOneof("payload") or "unknown"
            kinds[kind] = kinds.get(kind, 0) + 1
        for kind, count in kinds.items():
            _events_of(self._labels, kind).inc(count)

    def end(self, code: str) -> None:
        elapsed = time.perf_counter() - self._started
        RPC_SECONDS.labels(*self._labels, self._type, code).observe(elapsed)
        if self._stream:
            RPC_ACTIVE_STREAMS.labels(*self._labels).dec()


class TurnMeter:
    """The metrics of one turn as its events are logged: events by kind, model calls, tokens, cost, duration.

    `how` names the way the turn came to this replica (StartTurn, ContinueTurn,
    takeover), as the `grpc_method` label of its events.
    """

    __slots__ = ("_done", "_labels", "_seen", "_started")

    def __init__(self, how: str) -> None:
        self._labels = ("cogmesh.runtime.v1.RuntimeService", how)
        self._started = time.perf_counter()
        self._seen = self._done = False

    def logged(self, events: Iterable[events_pb2.RuntimeEvent]) -> None:
        for event in events:
            kind = event.WhichOneof("payload") or "unknown"
            _events_of(self._labels, kind).inc()
            self._seen = True
            if kind == "usage":
                usage = event.usage
                MODEL_CALLS.labels(usage.model, usage.provider).inc()
                MODEL_TOKENS.labels(usage.model, usage.provider, "input").inc(usage.input_tokens)
                MODEL_TOKENS.labels(usage.model, usage.provider, "output").inc(usage.output_tokens)
                MODEL_COST.labels(usage.model, usage.provider).inc(max(0.0, usage.cost_usd))
            elif kind in ("final", "error") and not self._done:
                self._done = True
                outcome = "ok" if kind == "final" else _ERROR_KINDS.get(event.error.kind, "unspecified")
                TURN_SECONDS.labels(outcome).observe(time.perf_counter() - self._started)

    def end(self) -> None:
        """The turn stopped here: when it said nothing about how it ended, it counts as aborted."""
        if self._seen and not self._done:
            self._done = True
            TURN_SECONDS.labels("aborted").observe(time.perf_counter() - self._started)


def record_genai_operation(
    operation: str,
    provider: str,
    request_model: str,
    response_model: str,
    duration_s: float,
    error_type: str = "",
    tokens: tuple[int, int] | None = None,
) -> None:
    """One GenAI client operation: its duration and, when the provider reported them, its (input, output) tokens."""
    GENAI_OPERATION_DURATION.labels(operation, provider, request_model, response_model, error_type).observe(duration_s)
    if tokens is not None:
        for kind, count in zip(("input", "output"), tokens, strict=True):
            GENAI_TOKEN_USAGE.labels(operation, provider, kind, request_model, response_model).observe(count)


# The running RPC's recorder: each RPC runs in its own task, so this is per call.
current_recorder: ContextVar[RpcRecorder | None] = ContextVar("cogmesh_rpc_recorder", default=None)


def record_written(events: Iterable[events_pb2.RuntimeEvent] = ()) -> None:
    """Count a streamed message that the interceptor cannot see or read (written with context.write)."""
    recorder = current_recorder.get()
    if recorder is not None:
        recorder.written(events)


def _decisions(message: Any) -> None:
    decisions = message.decisions if isinstance(message, policy_pb2.CheckToolCallsResponse) else [message]
    for decision in decisions:
        if isinstance(decision, policy_pb2.CheckToolCallResponse) and decision.verdict == policy_pb2.VERDICT_DENY:
            POLICY_DENIALS.labels(decision.rule or "unspecified", decision.source or "unspecified").inc()


# --------------------------------------------------------------------------- circuit breakers

BreakerSnapshot = Callable[[], Mapping[str, str]]


@dataclass(frozen=True)
class _BreakerSource:
    service: str
    scope: str
    snapshot: BreakerSnapshot


class BreakerCollector(Collector):
    """`cogmesh_circuit_breaker_state`: 1 for each breaker's current state, 0 for the others."""

    def __init__(self) -> None:
        self._sources: dict[tuple[str, str], _BreakerSource] = {}
        self._lock = threading.Lock()

    def register(self, service: str, scope: str, snapshot: BreakerSnapshot) -> None:
        with self._lock:
            self._sources[(service, scope)] = _BreakerSource(service, scope, snapshot)

    def unregister(self, service: str, scope: str) -> None:
        with self._lock:
            self._sources.pop((service, scope), None)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "cogmesh_circuit_breaker_state",
            "Circuit breaker state (1 = current), by service, scope (tool_server, interceptor, ...) and name.",
            labels=["service", "scope", "name", "state"],
        )
        with self._lock:
            sources = list(self._sources.values())
        for source in sources:
            try:
                states = dict(source.snapshot())
            except Exception:  # noqa: BLE001 - a broken snapshot must not break the scrape
                continue
            for name, state in sorted(states.items()):
                for candidate in CIRCUIT_STATES:
                    family.add_metric(
                        [source.service, source.scope, name, candidate], 1.0 if state == candidate else 0.0
                    )
        yield family


BREAKERS = BreakerCollector()
REGISTRY.register(BREAKERS)


def register_breakers(service: str, scope: str, snapshot: BreakerSnapshot) -> None:
    """Export breaker states: `snapshot()` maps each breaker's name to closed, open or half_open.

    e.g. in services/runtime/main.py:
    `register_breakers("runtime", "tool_server", lambda: {n: b.state.value for n, b in breakers.items()})`.
    """
    BREAKERS.register(service, scope, snapshot)


# --------------------------------------------------------------------------- /metrics endpoint


class MetricsServer:
    """The HTTP endpoint serving this process's metrics in Prometheus text format."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self._httpd, self._thread = httpd, thread

    @property
    def port(self) -> int:
        return int(self._httpd.server_port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve_metrics(host: str, port: int, registry: CollectorRegistry = REGISTRY) -> MetricsServer:
    """Serve /metrics on host:port (port 0 picks a free one) from a daemon thread."""
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise SystemExit(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    return MetricsServer(httpd, thread)
