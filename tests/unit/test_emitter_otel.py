"""The OpenTelemetry SpanProcessor turns ended OTel spans into coalesced span summaries."""

from __future__ import annotations

import pytest

from tests.unit.test_emitter_core import make
from tidings.schemas.wire.payloads import span_summaries

trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")


def test_ended_otel_spans_become_span_summaries() -> None:
    from opentelemetry.trace import Status, StatusCode

    from tidings.emitter.otel import TidingsSpanProcessor

    em, rec = make()
    provider = trace_sdk.TracerProvider()
    provider.add_span_processor(TidingsSpanProcessor(em))
    tracer = provider.get_tracer("test")
    for i in range(50):
        with tracer.start_as_current_span("load") as span:
            if i % 10 == 0:
                span.set_status(Status(StatusCode.ERROR))
    with tracer.start_as_current_span("save"):
        pass
    assert provider.force_flush(5000)
    summaries = {s.name: s for p in rec.parsed() for s in span_summaries(p.payload)}
    counts: dict[str, tuple[int, int]] = {}
    for p in rec.parsed():  # (a name may be in the first window, sent at once, and the next)
        for s in span_summaries(p.payload):
            c, e = counts.get(s.name, (0, 0))
            counts[s.name] = (c + s.count, e + s.errors)
    assert counts == {"load": (50, 5), "save": (1, 0)}
    assert summaries["load"].first_start > 1.6e9  # epoch seconds, not nanoseconds
