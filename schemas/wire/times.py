"""Time on the bus: RFC 3339 text to aware UTC datetimes and back, and epoch seconds.

Shared by the Event contract (eventTime, creationTimestamp), the status encoder and its
decoder, so all three read and write one form.
"""

from __future__ import annotations

from datetime import datetime

from tidings._compat import UTC, fromisoformat


def format_time(t: datetime) -> str:
    """RFC 3339 UTC with microseconds, the MicroTime form: ``2026-11-30T03:55:49.123456Z``.

    Naive datetimes are taken as UTC. Strings in this form sort chronologically.
    """
    if t.tzinfo is not None:
        t = t.astimezone(UTC)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{t.microsecond:06d}Z"
    )


def format_seconds(t: datetime) -> str:
    """``format_time`` cut to whole seconds: metav1.Time has second precision (the API server
    would cut the fraction anyway)."""
    return format_time(t)[:19] + "Z"


def parse_time(s: object) -> datetime | None:
    """Parse an RFC 3339 time into an aware UTC datetime; None when it is not one."""
    if not isinstance(s, str) or not 10 <= len(s) <= 40:
        return None
    try:
        t = fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        return t.replace(tzinfo=UTC)
    if t.utcoffset():
        try:
            return t.astimezone(UTC)
        except (OverflowError, ValueError):
            return None
    return t if t.tzinfo is UTC else t.replace(tzinfo=UTC)


def epoch(t: datetime) -> int:
    """Whole Unix seconds of an aware datetime (creation times have second precision)."""
    return int(t.timestamp())


def from_epoch(s: int) -> datetime:
    return datetime.fromtimestamp(s, UTC)
