"""The retry policy (pure): what is retried, Retry-After, backoff bounds, stopping."""

from __future__ import annotations

import email.utils

import pytest

from tidings.emitter.retry import (
    RETRY_AFTER_CAP_S,
    SendError,
    is_retryable_status,
    make_retrying,
    parse_retry_after,
)


@pytest.mark.parametrize(("status", "retryable"), [
    (0, True), (429, True), (500, True), (503, True), (504, True),
    (400, False), (401, False), (403, False), (404, False), (409, False), (422, False),
])
def test_only_transient_statuses_are_retried(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable
    assert SendError(status, "x").retryable is retryable


def test_retry_after_parses_seconds_dates_and_rejects_garbage() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("86400") == RETRY_AFTER_CAP_S
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    date = email.utils.formatdate(1_000_010.0, usegmt=True)
    assert parse_retry_after(date, now=1_000_000.0) == pytest.approx(10.0)


class Script:
    """A send that fails with the given errors, then succeeds."""

    def __init__(self, *errors: SendError) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def retrying(sleeps: list[float], **kw: object) -> object:
    kw.setdefault("abandoned", lambda: False)
    kw.setdefault("max_attempts", None)
    return make_retrying(sleep=sleeps.append, initial=0.1, maximum=2.0, **kw)  # type: ignore[arg-type]


def test_429_waits_at_least_retry_after_then_succeeds() -> None:
    sleeps: list[float] = []
    send = Script(SendError(429, "TooManyRequests", retry_after=1.5), SendError(503, "x"))
    assert retrying(sleeps)(send) == "ok"
    assert send.calls == 3
    assert sleeps[0] >= 1.5  # the server's word beats a shorter backoff
    assert 0.05 <= sleeps[1] <= 0.05 + 0.2  # second backoff: at most initial * 2


def test_connection_errors_back_off_exponentially_with_a_cap() -> None:
    sleeps: list[float] = []
    send = Script(*[SendError(0, "connection refused") for _ in range(12)])
    assert retrying(sleeps)(send) == "ok"
    assert send.calls == 13
    assert all(0.05 <= s <= 2.05 for s in sleeps)


@pytest.mark.parametrize("status", [403, 422, 400, 401])
def test_permanent_errors_are_raised_after_one_attempt(status: int) -> None:
    sleeps: list[float] = []
    send = Script(SendError(status, "nope"))
    with pytest.raises(SendError) as err:
        retrying(sleeps)(send)
    assert err.value.status == status
    assert send.calls == 1 and sleeps == []


def test_attempts_are_bounded_for_coalescible_data() -> None:
    sleeps: list[float] = []
    send = Script(*[SendError(500, "boom") for _ in range(10)])
    with pytest.raises(SendError):
        retrying(sleeps, max_attempts=3)(send)
    assert send.calls == 3


def test_abandoning_stops_retries() -> None:
    sleeps: list[float] = []
    flag = {"gone": False}

    def send() -> None:
        flag["gone"] = len(sleeps) >= 2
        raise SendError(0, "connection refused")

    with pytest.raises(SendError):
        retrying(sleeps, abandoned=lambda: flag["gone"])(send)
    assert len(sleeps) == 2
