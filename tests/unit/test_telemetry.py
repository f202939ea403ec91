"""ExportGate: spans are recorded only when something takes them; ids and sampled parents always flow."""

from __future__ import annotations

import pytest
from opentelemetry import context, trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from services.kit import telemetry
from services.kit.config import Settings
from services.kit.telemetry import ExportGate, build_tracer_provider, configure_tracing


def remote_parent(sampled: bool) -> context.Context:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    parent = SpanContext(trace_id=0x1234, span_id=0x99, is_remote=True, trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(parent))


def test_with_nothing_to_export_a_new_trace_keeps_its_ids_but_records_nothing() -> None:
    tracer = build_tracer_provider("test", Settings()).get_tracer("t")
    with tracer.start_as_current_span("root") as root:
        ids = root.get_span_context()
        assert not root.is_recording()
        assert ids.is_valid and not ids.trace_flags.sampled, "ids for logs and traceparent, flagged unsampled"
        with tracer.start_as_current_span("child") as child:
            assert child.get_span_context().trace_id == ids.trace_id and not child.is_recording()


@pytest.mark.parametrize("sampled", [True, False])
def test_with_nothing_to_export_a_callers_decision_is_followed(sampled: bool) -> None:
    tracer = build_tracer_provider("test", Settings()).get_tracer("t")
    span = tracer.start_span("served", context=remote_parent(sampled))
    assert span.is_recording() is sampled, "a recorded trace is not cut where it passes this process"
    assert span.get_span_context().trace_id == 0x1234
    assert span.get_span_context().trace_flags.sampled is sampled
    span.end()


def test_spans_are_recorded_when_exported_or_taken_by_a_processor() -> None:
    exporter = InMemorySpanExporter()
    tracer = build_tracer_provider("test", Settings(), [SimpleSpanProcessor(exporter)]).get_tracer("t")
    with tracer.start_as_current_span("root") as root:
        assert root.is_recording() and root.get_span_context().trace_flags.sampled
    assert [s.name for s in exporter.get_finished_spans()] == ["root"]
    provider = build_tracer_provider("test", Settings(otlp_endpoint="localhost:4317"))
    assert isinstance(provider.sampler, ExportGate) and provider.sampler.exporting
    provider.shutdown()


def test_a_processor_added_to_the_installed_provider_turns_recording_on(monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = build_tracer_provider("first", Settings())
    monkeypatch.setattr(telemetry.trace, "get_tracer_provider", lambda: quiet)
    tracer = quiet.get_tracer("t")
    assert not tracer.start_span("before").is_recording()
    exporter = InMemorySpanExporter()
    assert configure_tracing("second", Settings(), [SimpleSpanProcessor(exporter)]) is quiet
    with tracer.start_as_current_span("after") as span:
        assert span.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["after"]
