"""The one error type of the Kubernetes client layer, and the one rule for what is retried.

A request either gets a 2xx answer or raises :class:`KubeError`: ``status`` is the HTTP status
(0 = no answer at all: connection refused, reset, timeout, TLS), ``reason`` the machine
reason of the API server's ``metav1.Status`` (``AlreadyExists``, ``Forbidden``, ...) or the
exception class for status 0.
"""

from __future__ import annotations

import email.utils
import time

import orjson

# A misbehaving server must not park a client for an hour.
RETRY_AFTER_CAP_S = 60.0


def is_retryable_status(status: int) -> bool:
    """0 (no answer), 429 and 5xx are transient; every other status is final.

    401 is final too: the layer already re-reads rotated tokens and re-runs exec plugins on a
    401 before it gives one back, so a 401 that reaches the caller means wrong credentials,
    and retrying would only hide it. 409 is the caller's business (AlreadyExists means
    delivered for a create; Conflict means re-read and re-decide for an update).
    """
    return status == 0 or status == 429 or 500 <= status <= 599


class KubeError(Exception):
    """A request that did not get a 2xx answer (status 0: no answer)."""

    def __init__(self, status: int, message: str, *, reason: str = "", body: bytes = b"",
                 retry_after: float | None = None) -> None:
        text = f"{reason}: {message}" if reason and message else (reason or message)
        super().__init__(f"HTTP {status} {text}".strip() if status else text)
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return is_retryable_status(self.status)

    @classmethod
    def from_response(cls, status: int, data: bytes, retry_after: str | None = None,
                      http_reason: str = "") -> KubeError:
        """From a non-2xx answer: its metav1.Status body when there is one (tolerant of any
        other body), and its Retry-After header."""
        reason, message = "", ""
        try:
            obj = orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            reason, message = str(obj.get("reason") or ""), str(obj.get("message") or "")
        elif data:
            message = data[:300].decode("utf-8", "replace").strip()
        return cls(status, message[:300] or http_reason, reason=reason, body=data,
                   retry_after=parse_retry_after(retry_after))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP-date), capped."""
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


class ConfigError(Exception):
    """No usable cluster configuration: a missing or malformed kubeconfig, an unknown context,
    unreadable TLS files, a credential plugin that failed. The message is one line."""
