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


def is_expired(status: int, reason: str = "") -> bool:
    """Whether an answer (or a watch's ERROR Status) says the resourceVersion asked for is
    no longer there: 410 Gone, or the reasons Expired and Gone. What client-go's reflector
    relists on, rather than retrying the same version."""
    return status == 410 or reason in ("Expired", "Gone")


class StatusPredicates:
    """What an HTTP status means, by name, for errors that carry one (``status``): callers
    ask ``err.not_found`` rather than compare status codes."""

    status: int

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409: AlreadyExists for a create, Conflict for a write with a stale resourceVersion."""
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def unauthorized(self) -> bool:
        return self.status == 401

    @property
    def denied(self) -> bool:
        """401 or 403: the credentials were refused, or lack the right."""
        return self.status in (401, 403)

    @property
    def bad_request(self) -> bool:
        return self.status == 400

    @property
    def invalid(self) -> bool:
        """400 or 422: the server refused what was sent."""
        return self.status in (400, 422)

    @property
    def unanswered(self) -> bool:
        """No answer at all (connection refused, reset, timeout, TLS)."""
        return self.status == 0


class KubeError(StatusPredicates, Exception):
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

    @property
    def expired(self) -> bool:
        """The resourceVersion asked for is gone (``is_expired``): list again."""
        return is_expired(self.status, self.reason)

    @property
    def already_exists(self) -> bool:
        """409 AlreadyExists: a create that found the object there (delivered before)."""
        return self.status == 409 and self.reason == "AlreadyExists"

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
