"""The retry policy for event creates (pure): what is retried, and how long to wait.

429, 5xx and connection errors are retried with full-jitter exponential backoff, never
sooner than the server's Retry-After. Other 4xx (403, 422, ...) are permanent.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable

import tenacity
from tenacity.wait import wait_base

# A misbehaving server must not park the sender for an hour.
RETRY_AFTER_CAP_S = 60.0


class SendError(Exception):
    """A create that did not succeed: HTTP ``status`` (0 = no response) and a short reason."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}" if status else reason)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return is_retryable_status(self.status)


def is_retryable_status(status: int) -> bool:
    """0 (connection error, timeout, TLS), 429 and 5xx are transient; everything else is not.

    401 is permanent too: in-cluster tokens are refreshed before they expire, so a 401 means
    the credentials are wrong, and retrying would only hide it.
    """
    return status == 0 or status == 429 or 500 <= status <= 599


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        seconds = when - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


class wait_retry_after(wait_base):
    """max(Retry-After of the last failure, backoff): honour the server, keep the jitter."""

    def __init__(self, backoff: wait_base) -> None:
        self.backoff = backoff

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        backoff = self.backoff(retry_state)
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None and outcome.failed else None
        retry_after = getattr(exc, "retry_after", None) or 0.0
        return max(float(retry_after), backoff)


def backoff(initial: float, maximum: float) -> wait_base:
    """Full jitter (uniform in [0, min(max, initial * 2**n)]) plus a 50 ms floor, so many pods
    coming back from one outage spread out instead of stampeding."""
    return tenacity.wait_fixed(0.05) + tenacity.wait_random_exponential(
        multiplier=initial, max=maximum)


def make_retrying(*, abandoned: Callable[[], bool], sleep: Callable[[float], object],
                  max_attempts: int | None, initial: float = 0.25,
                  maximum: float = 30.0,
                  before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
                  ) -> tenacity.Retrying:
    """A Retrying that retries transient SendErrors until delivered, ``max_attempts`` is reached
    or ``abandoned()`` turns true; ``sleep`` should return early on shutdown."""
    def stop(state: tenacity.RetryCallState) -> bool:
        return abandoned() or (max_attempts is not None and state.attempt_number >= max_attempts)

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda e: isinstance(e, SendError) and e.retryable),
        wait=wait_retry_after(backoff(initial, maximum)),
        stop=stop,
        sleep=sleep,  # type: ignore[arg-type]  # Event.wait (returns a bool) is fine here
        reraise=True,
        before_sleep=before_sleep,
    )

