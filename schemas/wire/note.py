"""The note codec: a payload as compact JSON that always fits the API server's 1024-byte limit.

Wire format (keys are fixed; payload fields keep their model names, defaults are omitted)::

    {"v": <schema version: the oldest that reads this note>, "t": <payload type = Event reason>,
     "i": <emitter instance id>, "s": <seq>,          # optional envelope: the dedup key
     ...payload fields}

Oversized text is shrunk field by field, by rule, before encoding (see ``SHRINKABLE``);
encoded JSON is never cut, and neither is a name: a payload that cannot fit otherwise is
refused (``NoteTooLarge``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import orjson
from pydantic import ValidationError

from .constants import INSTANCE_LIMIT, NOTE_LIMIT, SCHEMA_VERSION, SEQ_MAX
from .kinds import KNOWN_PAYLOADS, SHRINKABLE
from .payloads import Payload, UnknownPayload, cut_text, payload_type, payload_version
from .rejection import Rejection, RejectReason, describe_validation_error, validation_reason

# Text fields that must keep at least one character (the "…" marker) when cut.
_NON_EMPTY = frozenset({"name", "app"})
_INSTANCE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._:\-]{{0,{INSTANCE_LIMIT - 1}}}\Z")


def valid_instance(instance: object) -> bool:
    """Whether ``instance`` is a usable emitter instance id (ASCII, at most 64 chars)."""
    return isinstance(instance, str) and _INSTANCE.match(instance) is not None


# valid_instance for the hot path: a handful of emitter instances send every event. Notes are
# at most NOTE_LIMIT bytes, so the cache's size is bounded too.
@lru_cache(maxsize=4096)
def _good_instance(instance: str) -> bool:
    return _INSTANCE.match(instance) is not None


class NoteTooLarge(ValueError):
    """A valid payload whose note cannot fit NOTE_LIMIT bytes without cutting a name."""


def valid_seq(seq: object) -> bool:
    """Whether ``seq`` is a usable sequence number (a non-negative int64, not a bool)."""
    return type(seq) is int and 0 <= seq <= SEQ_MAX


def _fields(p: Payload) -> dict[str, Any]:
    if isinstance(p, UnknownPayload):
        return dict(p.raw)
    return p.model_dump(exclude_defaults=True)


def _head(p: Payload, instance: str | None, seq: int | None) -> dict[str, Any]:
    head: dict[str, Any] = {"v": payload_version(p), "t": payload_type(p)}
    if instance is not None:
        head["i"] = instance
    if seq is not None:
        head["s"] = seq
    return head


def encode_note_bytes(p: Payload, *, instance: str | None = None, seq: int | None = None) -> bytes:
    """Like ``encode_note`` but returns UTF-8 bytes (what the API server counts)."""
    if instance is not None and not valid_instance(instance):
        raise ValueError("instance must match [A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
    if seq is not None and not valid_seq(seq):
        raise ValueError("seq must be an int in [0, 2**63-1]")
    head = _head(p, instance, seq)
    body = _fields(p)
    data = orjson.dumps({**head, **body})
    if len(data) <= NOTE_LIMIT:
        return data
    if isinstance(p, UnknownPayload):
        # An unknown payload cannot be shrunk by rule, so its fields are dropped whole.
        return orjson.dumps(head)
    for field in SHRINKABLE.get(payload_type(p), ()):
        text = body.get(field, "")
        if not isinstance(text, str) or not text:
            continue
        fixed = len(data) - len(orjson.dumps(text))
        budget = NOTE_LIMIT - fixed
        lo = 1 if field in _NON_EMPTY else 0
        # Any cut that fits has at most NOTE_LIMIT characters, so huge text costs no more.
        hi = min(len(text) - 1, NOTE_LIMIT)
        best = cut_text(text, lo)
        # Largest cut that fits; the escaped size is monotone enough in k for bisection.
        while lo <= hi:
            mid = (lo + hi) // 2
            cand = cut_text(text, mid)
            if len(orjson.dumps(cand)) <= budget:
                best, lo = cand, mid + 1
            else:
                hi = mid - 1
        if best:
            body[field] = best
        else:
            body.pop(field, None)
        data = orjson.dumps({**head, **body})
        if len(data) <= NOTE_LIMIT:
            return data
    # Names are never cut (two would collapse into one): a long name beside a long URL can
    # leave no room, and then the fact is refused.
    raise NoteTooLarge(f"{payload_type(p)} does not fit in a {NOTE_LIMIT}-byte note "
                       f"({len(data)} bytes): use a shorter name or URL")


def encode_note(p: Payload, *, instance: str | None = None, seq: int | None = None) -> str:
    """Encode ``p`` as compact JSON of at most NOTE_LIMIT UTF-8 bytes.

    ``instance`` and ``seq`` (the dedup key) are carried in the envelope when given.
    Raises ValueError for an invalid instance or seq, and ``NoteTooLarge`` (a ValueError)
    for a payload that fits only with a name cut (a long name beside a long URL).
    """
    return encode_note_bytes(p, instance=instance, seq=seq).decode()


def decode_envelope(note: object) -> tuple[Payload, str | None, int | None] | Rejection:
    """Decode a note into (payload, instance, seq). Never raises."""
    if isinstance(note, str):
        if len(note) > NOTE_LIMIT or (
            not note.isascii() and len(note.encode("utf-8", "replace")) > NOTE_LIMIT
        ):
            return Rejection(RejectReason.NOTE_TOO_LARGE, f"note exceeds {NOTE_LIMIT} bytes")
    elif isinstance(note, bytes | bytearray | memoryview):
        if len(note) > NOTE_LIMIT:
            return Rejection(RejectReason.NOTE_TOO_LARGE, f"note exceeds {NOTE_LIMIT} bytes")
    else:
        return Rejection(RejectReason.INVALID_PAYLOAD, "note is not a string")
    try:
        obj = orjson.loads(note)
    except Exception:
        return Rejection(RejectReason.MALFORMED_JSON, "note is not valid JSON")
    return decode_obj(obj)


def decode_obj(obj: object) -> tuple[Payload, str | None, int | None] | Rejection:
    """Decode an already-parsed note object. Takes ownership of (and may mutate) ``obj``."""
    if type(obj) is not dict:
        return Rejection(RejectReason.INVALID_PAYLOAD, "note is not a JSON object")
    version = obj.pop("v", None)
    kind = obj.pop("t", None)
    instance = obj.pop("i", None)
    seq = obj.pop("s", None)
    if version is None or kind is None:
        return Rejection(RejectReason.MISSING_FIELD, "note lacks its version 'v' or type 't'")
    if type(version) is not int or version < 1:
        return Rejection(RejectReason.INVALID_PAYLOAD, "note version 'v' must be a positive int")
    if not isinstance(kind, str):
        return Rejection(RejectReason.INVALID_PAYLOAD, "note type 't' must be a string")
    if instance is not None and not (isinstance(instance, str) and _good_instance(instance)):
        return Rejection(RejectReason.INVALID_PAYLOAD, "note instance 'i' is not a valid id")
    if seq is not None and not (type(seq) is int and 0 <= seq <= SEQ_MAX):
        return Rejection(RejectReason.INVALID_PAYLOAD, "note seq 's' is not a non-negative int64")
    model = KNOWN_PAYLOADS.get(kind)
    try:
        if model is None or version > SCHEMA_VERSION:
            payload: Payload = UnknownPayload(type=kind, version=version, raw=obj)
        else:
            # The bare validator skips model_validate's Python wrapper on the hot path.
            payload = model.__pydantic_validator__.validate_python(obj)
    except ValidationError as e:
        return Rejection.of(validation_reason(e), f"{kind}: {describe_validation_error(e)}")
    except Exception as e:  # a validator bug must still not escape: totality comes first
        return Rejection.of(RejectReason.INVALID_PAYLOAD, f"{kind}: {type(e).__name__}")
    return payload, instance, seq


def decode_note(note: str | bytes) -> Payload | Rejection:
    """Decode a note into its payload; bad input yields a Rejection. Never raises.

    An unknown type or a schema version newer than SCHEMA_VERSION yields an UnknownPayload.
    """
    res = decode_envelope(note)
    return res if isinstance(res, Rejection) else res[0]
