"""OpenTelemetry wiring: one tracer provider per process, exporting only when configured.

Every hop of a turn is a gRPC call; the OpenTelemetry gRPC interceptors (server side
in server.py, client side in clients.py) put the W3C `traceparent` header in the call
metadata and continue the caller's trace on the other side, so one turn is one trace
from the gateway to the leaves. Spans go to an OTLP/gRPC collector when
`otlp_endpoint` is set; with `tracing` off no provider is installed and every span
is a no-op. With tracing on and nothing to export to, a trace this process starts is
not recorded (`ExportGate`): its ids still go in the logs and on the wire, and a
recorded trace that reaches it from a caller is still followed.

The runtime's GenAI spans and metrics (services/runtime/genai_telemetry.py) read the
process's `GENAI` options, set here from the settings the process was started with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler, SamplingResult, TraceIdRatioBased

from services.kit.config import Settings


@dataclass
class GenAIOptions:
    """Process-wide, as OpenTelemetry's own OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is."""

    capture_content: bool = False  # prompts, completions, tool arguments and results on spans
    metrics: bool = True  # the gen_ai_client_* Prometheus histograms


GENAI = GenAIOptions()


def otlp_exporter(endpoint: str) -> SpanExporter:
    """An OTLP/gRPC span exporter; `https://` endpoints use TLS, anything else plaintext."""
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError as exc:  # the exporter is an optional extra
        raise SystemExit(
            "COGMESH_OTLP_ENDPOINT is set but the OTLP exporter is not installed: pip install 'cogmesh[otlp]'"
        ) from exc
    exporter: SpanExporter = OTLPSpanExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))
    return exporter


class ExportGate(Sampler):
    """The configured sampler while something takes this process's spans; with nothing to take them, a
    new trace is not recorded (its span ids are still made, for logs and the `traceparent` header),
    and a recorded parent is still followed, so a trace is never cut where it passes a quiet process.
    Recording spans that go nowhere cost the runtime about 7% of its CPU on a tool-calling turn."""

    def __init__(self, ratio: float) -> None:
        self.exporting = False
        self._ratio = ratio
        self._configured = ParentBased(TraceIdRatioBased(ratio))
        self._unexported = ParentBased(ALWAYS_OFF)

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        chosen = self._configured if self.exporting else self._unexported
        return chosen.should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return f"ExportGate(exporting={self.exporting}, ratio={self._ratio})"


def build_tracer_provider(service: str, settings: Settings, processors: Sequence[SpanProcessor] = ()) -> TracerProvider:
    """A provider for `service`: the configured sampler, OTLP export when configured, plus `processors`."""
    gate = ExportGate(settings.trace_sample_ratio)
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"cogmesh-{service}", "service.namespace": "cogmesh"}),
        # A sampled parent is always followed, so a trace is never cut in the middle of a turn.
        sampler=gate,
    )
    if settings.otlp_endpoint:
        provider.add_span_processor(BatchSpanProcessor(otlp_exporter(settings.otlp_endpoint)))
    for processor in processors:
        provider.add_span_processor(processor)
    gate.exporting = bool(settings.otlp_endpoint or processors)
    return provider


def configure_tracing(
    service: str, settings: Settings, processors: Sequence[SpanProcessor] = ()
) -> TracerProvider | None:
    """Install the process-wide tracer provider; None (spans are no-ops) when tracing is off.

    OpenTelemetry allows one global provider per process. When one is installed already
    (several services in one test process), `processors` are added to it instead.
    Also sets the process's GenAI options from `settings`.
    """
    GENAI.capture_content = settings.genai_capture_content
    GENAI.metrics = settings.metrics
    if not settings.tracing:
        return None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        for processor in processors:
            current.add_span_processor(processor)
        if processors and isinstance(current.sampler, ExportGate):
            current.sampler.exporting = True
        return current
    provider = build_tracer_provider(service, settings, processors)
    trace.set_tracer_provider(provider)
    return provider
