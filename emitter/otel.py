"""OpenTelemetry bridge: a SpanProcessor that folds ended OTel spans into tidings span summaries.

Needs the ``otel`` extra (``pip install 'tidings[otel]'``); nothing else in tidings imports it.
"""

from __future__ import annotations

from typing import Any

try:
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
    from opentelemetry.trace import StatusCode
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("tidings.emitter.otel needs opentelemetry-sdk: "
                      "pip install 'tidings[otel]'") from e

from . import get_emitter
from .core import Emitter


class TidingsSpanProcessor(SpanProcessor):
    """Add to a TracerProvider; every ended span becomes one coalesced tidings span.

        provider.add_span_processor(TidingsSpanProcessor())

    Runs in the thread that ends the span, so it does only the emitter's O(1) record.
    """

    def __init__(self, emitter: Emitter | None = None) -> None:
        self._emitter = emitter

    def _target(self) -> Emitter:
        return self._emitter or get_emitter()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        start, end = span.start_time, span.end_time
        if start is None or end is None:
            return
        error = span.status is not None and span.status.status_code is StatusCode.ERROR
        # OTel times are epoch nanoseconds.
        self._target().record_span(span.name, start / 1e9, end / 1e9, error)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._target().flush(timeout_millis / 1000)
