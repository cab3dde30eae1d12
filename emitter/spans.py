"""Spans for user code: ``with span("epoch"):``, ``@traced("load")``, ``start_span(...).end()``.

A span measures with perf_counter (monotonic) and stamps its start with wall time.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Span:
    """One running span. Ends once: by ``end()``, or by leaving its ``with`` block (an
    exception leaving the block marks it as an error)."""

    __slots__ = ("_emitter", "_t0", "ended", "name", "start")

    def __init__(self, emitter: Any, name: str) -> None:
        self._emitter = emitter
        self.name = name
        self.start = time.time()
        self._t0 = time.perf_counter()
        self.ended = False

    def end(self, error: bool = False) -> None:
        if self.ended:
            return
        self.ended = True
        self._emitter._record(self.name, self.start, time.perf_counter() - self._t0, error)

    def __enter__(self) -> Span:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.end(error=exc_type is not None)


def traced(get_emitter: Callable[[], Any], name: str | None,
           fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``fn`` (sync or async) so each call is a span named ``name`` or its qualname."""
    span_name = name or getattr(fn, "__qualname__", None) or repr(fn)

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            with Span(get_emitter(), span_name):
                return await fn(*args, **kwargs)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with Span(get_emitter(), span_name):
            return fn(*args, **kwargs)

    return wrapper
