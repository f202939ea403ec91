"""OpenTelemetry wiring: one tracer provider per process, exporting only when configured.

Every hop of a turn is a gRPC call; the OpenTelemetry gRPC interceptors (server side
in server.py, client side in clients.py) put the W3C `traceparent` header in the call
metadata and continue the caller's trace on the other side, so one turn is one trace
from the gateway to the leaves. Spans go to an OTLP/gRPC collector when
`otlp_endpoint` is set; with `tracing` off no provider is installed and every span
is a no-op.

The runtime's GenAI spans and metrics (services/runtime/genai_telemetry.py) read the
process's `GENAI` options, set here from the settings the process was started with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

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


def build_tracer_provider(service: str, settings: Settings, processors: Sequence[SpanProcessor] = ()) -> TracerProvider:
    """A provider for `service`: the configured sampler, OTLP export when configured, plus `processors`."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"cogmesh-{service}", "service.namespace": "cogmesh"}),
        # A sampled parent is always followed, so a trace is never cut in the middle of a turn.
        sampler=ParentBased(TraceIdRatioBased(settings.trace_sample_ratio)),
    )
    if settings.otlp_endpoint:
        provider.add_span_processor(BatchSpanProcessor(otlp_exporter(settings.otlp_endpoint)))
    for processor in processors:
        provider.add_span_processor(processor)
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
        return current
    provider = build_tracer_provider(service, settings, processors)
    trace.set_tracer_provider(provider)
    return provider
