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
    BAD_TASK_ID = "bad_task_id"  # a TaskFeedback subject whose name breaks the task-id rule
    INCONSISTENT_SPAN = "inconsistent_span"  # errors > count, total_s < max_s, ...
    INVISIBLE_TEXT = "invisible_text"  # a name holding zero-width or other format characters
    NAME_TOO_LONG = "name_too_long"  # a name longer than NAME_LIMIT (names are never cut)
    UNVERIFIED_LINEAGE = "unverified_lineage"  # PodSpawned the spawned pod does not confirm
    # regarding.uid names a TaskFeedback that is not the task's object (a deleted run's)
    OTHER_OBJECT = "other_object"
    # a fact of a run whose finished TaskFeedback the TTL deleted, arriving after the delete
    DELETED_TASK = "deleted_task"
    UNKNOWN_TASK = "unknown_task"  # a fact about a pod whose labels cannot be read (gone)
    # a pod whose labels claim an owner (a Job's controller-uid, ...) no live object has: a
    # forged claim, or a pod of a deleted object whose name a new one took
    UNVERIFIED_OWNER = "unverified_owner"


# pydantic error types raised by the payload validators that have a reason of their own.
VALIDATION_REASONS = {
    "inconsistent_span": RejectReason.INCONSISTENT_SPAN,
    "invisible_text": RejectReason.INVISIBLE_TEXT,
    "name_too_long": RejectReason.NAME_TOO_LONG,
}


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


def validation_reason(e: ValidationError) -> RejectReason:
    """The reason a payload validation error is counted under (invalid_payload by default)."""
    for err in e.errors(include_url=False, include_input=False, include_context=False):
        reason = VALIDATION_REASONS.get(err["type"])
        if reason is not None:
            return reason
    return RejectReason.INVALID_PAYLOAD


def describe_validation_error(e: ValidationError) -> str:
    """A compact, input-free description of a pydantic error (input values may be hostile)."""
    parts = []
    for err in e.errors(include_url=False, include_input=False, include_context=False)[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "payload"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
