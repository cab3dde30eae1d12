"""Typed rejections: bad input becomes a value with a stable reason, never an exception.

Reason values are stable snake_case strings, used as Prometheus label values.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from tidings._compat import StrEnum

from .text import sanitize_text

_MESSAGE_LIMIT = 300


class RejectReason(StrEnum):
    """Why an event or note was refused. Values are part of the metrics contract."""

    MALFORMED_JSON = "malformed_json"
    INVALID_PAYLOAD = "invalid_payload"
    NOTE_TOO_LARGE = "note_too_large"
    NOT_A_BUS_EVENT = "not_a_bus_event"
    MISSING_FIELD = "missing_field"
    BAD_REGARDING = "bad_regarding"
    BAD_RELATED = "bad_related"
    SPOOFED_SENDER = "spoofed_sender"
    BAD_NAME = "bad_name"
    BAD_TIME = "bad_time"
    BAD_WATCH_LINE = "bad_watch_line"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A refused input: ``reason`` for counting, ``message`` (sanitised, short) for humans."""

    reason: RejectReason
    message: str

    @classmethod
    def of(cls, reason: RejectReason, message: str) -> Rejection:
        # Messages may quote attacker-controlled text, so they are neutralised and bounded.
        msg = sanitize_text(message)
        if len(msg) > _MESSAGE_LIMIT:
            msg = msg[: _MESSAGE_LIMIT - 1] + "…"
        return cls(reason, msg)


def describe_validation_error(e: ValidationError) -> str:
    """A compact, input-free description of a pydantic error (input values may be hostile)."""
    parts = []
    for err in e.errors(include_url=False, include_input=False, include_context=False)[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "payload"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
