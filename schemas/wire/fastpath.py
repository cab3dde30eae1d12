"""The watcher's fast parse: a raw watch line to the same ``WatchItem`` as ``parse_watch_line``.

``parse_watch_line`` (event.py) stays the reference. This path only *accepts*: it decodes the
line into msgspec structs (the fields the contract reads; ``managedFields`` and the rest are
skipped without building objects), runs the same checks on them, and validates the common
payloads with the models' own field validators, then builds the pydantic object without
pydantic's Python wrapper. The moment anything is unusual (a type msgspec refuses, a failed
check, a null, a payload this path does not know, a note without its envelope), the line goes
to the reference, so every rejection comes from the reference and keeps its exact reason and
message. tests/unit/test_schemas_fastpath.py proves the two agree on random streams.

One known difference: JSON numbers beyond the float range (``1e999``) inside fields the
contract never reads are skipped by msgspec, while orjson refuses the whole line. The API
server cannot send such a line (Go's encoder writes no infinities), so the watcher keeps the
speed; the test pins the difference.

msgspec is a dependency of ``tidings[watcher]`` only: nothing else in schemas/ imports this.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType
from pydantic import BaseModel

from tidings._compat import UTC, fromisoformat

from .constants import (
    ACTION,
    API_VERSION,
    BUS_CONTROLLER,
    EVENTS_API_VERSION,
    KIND,
    NOTE_LIMIT,
    SCHEMA_VERSION,
    SEQ_MAX,
    URL_LIMIT,
)
from .event import (
    PodRef,
    TaskRef,
    WatchItem,
    _dns_prefix,
    _name_digest,
    _new_parsed_event,
    _new_watch_item,
    _sender,
    _subject,
    _task_id,
    parse_watch_line,
)
from .note import _good_instance
from .payloads import (
    METRIC_POINTS_MAX,
    METRIC_ROWS_MAX,
    SPAN_ROWS_MAX,
    DeckReady,
    LogLink,
    Metric,
    Progress,
    SpanSummaries,
    SpanSummary,
    Window,
    _any_uri,
    _clean_name,
    _round_fraction,
    _web_url,
    span_inconsistency,
)
from .text import sanitize_text
from .times import parse_time

__all__ = ["fast_watch_line"]


# The constant fields of a bus event are Literal types: msgspec checks them while decoding
# (a mismatch fails the decode, and the reference judges the line) and allocates nothing
# for them. The literals restate constants.py (a Literal cannot name a constant); the check
# below the classes keeps them equal.
class _Reg(Struct, frozen=True):  # frozen: hashable, part of the per-sender cache key
    # UNSET (absent) and a string are the only shapes handled here; a null or any other type
    # fails the decode and the line goes to the reference, which tells them apart.
    kind: Literal["TaskFeedback"]
    apiVersion: Literal["tidings.dev/v1alpha1"]
    name: str
    namespace: str | UnsetType = UNSET
    uid: str | UnsetType = UNSET


class _Rel(Struct, frozen=True):
    kind: Literal["Pod"]
    name: str
    uid: str
    apiVersion: Literal["v1"] | UnsetType = UNSET
    namespace: str | UnsetType = UNSET


class _Ann(Struct):
    # Only the annotation this path reads; the others (map[string]string) are skipped.
    sender_uid: str | UnsetType = msgspec.field(default=UNSET, name="tidings.dev/sender-uid")


class _Meta(Struct):
    name: str
    namespace: str
    resourceVersion: str | UnsetType = UNSET
    creationTimestamp: str | UnsetType = UNSET
    annotations: _Ann | UnsetType = UNSET


class _Event(Struct):
    reportingController: Literal["tidings.dev/bus"]
    action: Literal["Report"]
    metadata: _Meta
    eventTime: str
    type: Literal["Normal", "Warning"]
    note: str
    reason: str
    regarding: _Reg
    related: _Rel
    apiVersion: Literal["events.k8s.io/v1"] | UnsetType = UNSET
    kind: Literal["Event"] | UnsetType = UNSET


class _Line(Struct):
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    object: _Event


if (BUS_CONTROLLER, ACTION, EVENTS_API_VERSION, KIND, API_VERSION) != (
        "tidings.dev/bus", "Report", "events.k8s.io/v1", "TaskFeedback", "tidings.dev/v1alpha1"):
    raise ImportError("schemas/wire/fastpath.py's Literal types no longer match constants.py")


_decode_line = msgspec.json.Decoder(_Line).decode
_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})
_new = object.__new__
# BaseModel's slots, written through their descriptors (its own __setattr__ is frozen).
_set_dict = object.__setattr__
_set_fields = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _model(cls: type[Any], values: dict[str, Any], given: set[str]) -> Any:
    """The object ``cls.__pydantic_validator__`` builds from already validated ``values``
    (all fields, in order; ``given``: the keys the input carried), without its wrapper."""
    m = _new(cls)
    _set_dict(m, "__dict__", values)
    _set_fields(m, given)
    _set_extra(m, None)
    _set_private(m, None)
    return m


# Span, link and deck names repeat: each distinct name is cleaned once. Notes are at most
# NOTE_LIMIT bytes, so the keys are bounded too.
@lru_cache(maxsize=4096)
def _name(v: str) -> str | None:
    try:
        out = _clean_name(v)
    except Exception:
        return None
    return out if type(out) is str and out else None


# The notes this path decodes, as msgspec structs tagged by the note's "t". Anything else (an
# unknown type or field, a null, a bool for an int, a missing required field) fails the
# decode, and the reference judges the line. ``int | float`` keeps an int an int, as the
# reference does; such a value is then left to the reference (see ``_floats``).
class _Note(Struct, kw_only=True, forbid_unknown_fields=True, tag_field="t"):
    v: int
    i: str | UnsetType = UNSET  # without i or s the annotations decide: the reference's path
    s: int | UnsetType = UNSET


class _SpanNote(_Note, tag="SpanSummary"):
    name: str
    count: int
    total_s: int | float
    min_s: int | float
    max_s: int | float
    first_start: int | float
    last_end: int | float
    errors: int | UnsetType = UNSET


class _SpansNote(_Note, tag="SpanSummaries"):
    base_us: int
    spans: list[tuple[str, int, int, int, int, int, int, int]]


class _ProgressNote(_Note, tag="Progress"):
    fraction: int | float
    message: str | UnsetType = UNSET
    final: bool | UnsetType = UNSET
    failed: bool | UnsetType = UNSET
    workers: int | UnsetType = UNSET


class _WindowProgress(Struct, kw_only=True, forbid_unknown_fields=True):
    fraction: int | float
    message: str | UnsetType = UNSET
    final: bool | UnsetType = UNSET
    failed: bool | UnsetType = UNSET
    workers: int | UnsetType = UNSET


# A metric row: [name, value, step], optionally followed by min, max and points (a flat
# list of step, value pairs); its fields' types are checked one by one (``_metric_row``).
_MetricRow = list[str | int | float | list[int | float] | None]


class _WindowNote(_Note, tag="Window"):
    progress: _WindowProgress | UnsetType = UNSET
    metrics: list[_MetricRow] | UnsetType = UNSET
    base_us: int | UnsetType = UNSET
    spans: list[tuple[str, int, int, int, int, int, int, int]] | UnsetType = UNSET


class _LinkNote(_Note, tag="LogLink"):
    name: str
    url: str


class _DeckNote(_Note, tag="DeckReady"):
    name: str
    uri: str


_decode_note = msgspec.json.Decoder(
    _SpanNote | _SpansNote | _ProgressNote | _WindowNote | _LinkNote | _DeckNote).decode
_SPAN_FIELDS = frozenset(
    {"name", "count", "total_s", "min_s", "max_s", "first_start", "last_end", "errors"})
_SPAN_REQUIRED = frozenset(_SPAN_FIELDS - {"errors"})


def _span(name: str, count: int, total: float, lo: float, hi: float, first: float,
          last: float, errors: int, given: frozenset[str]) -> Any:
    """The SpanSummary the reference validates from these values, or None when it may not."""
    # Strict types as pydantic's strict mode reads them; the caller passes only floats.
    # The exact comparisons imply the reference's tolerant consistency checks, and with them
    # most of the fields' bounds (0 <= lo <= hi <= total <= 9e9, 0 <= first <= last <= 1e11,
    # errors <= count <= 2**53): only the bounds they leave open are compared. A summary that
    # fails them gets every bound and the tolerant check itself.
    if errors <= count and lo <= hi <= total and lo * count <= total <= hi * count \
            and first <= last and hi <= last - first:
        if not (1 <= count <= 2**53 and errors >= 0 and lo >= 0.0 and total <= 9.0e9
                and first >= 0.0 and last <= 1.0e11):
            return None
    elif not (1 <= count <= 2**53 and 0.0 <= total <= 9.0e9 and 0.0 <= lo <= 9.0e9
              and 0.0 <= hi <= 9.0e9 and 0.0 <= first <= 1.0e11 and 0.0 <= last <= 1.0e11
              and 0 <= errors <= 2**53) or span_inconsistency(
                count, total, lo, hi, first, last, errors) is not None:
        return None
    clean = _name(name)
    if clean is None:
        return None
    return _model(SpanSummary, {"name": clean, "count": count, "total_s": total, "min_s": lo,
                                "max_s": hi, "first_start": first, "last_end": last,
                                "errors": errors}, set(given))


def _span_rows(base: int, rows: list[tuple[str, int, int, int, int, int, int, int]]
               ) -> tuple[Any, ...] | None:
    """SpanSummaries' rows as its validator converts them, or None when it may not."""
    out = []
    for name, count, total, lo, hi, start, end, errors in rows:
        # As SpanSummaries' row validator converts them (integers to float seconds).
        if start < 0 or end < 0 or base + end > 10**17:
            return None
        row = _span(name, count, total / 1e9, lo / 1e9, hi / 1e9, (base + start) / 1e6,
                    (base + end) / 1e6, errors, _SPAN_FIELDS)
        if row is None:
            return None
        out.append(row)
    return tuple(out)


def _spans_note(n: _SpansNote) -> Any:
    base, rows = n.base_us, n.spans
    if not (0 <= base <= 10**17 and 1 <= len(rows) <= SPAN_ROWS_MAX):
        return None
    spans = _span_rows(base, rows)
    if spans is None:
        return None
    return _model(SpanSummaries, {"base_us": base, "spans": spans}, {"base_us", "spans"})


_METRIC_BASE = frozenset({"name", "value", "step"})


def _metric_row(row: _MetricRow) -> Any:
    """The Metric the reference validates from a Window's metric row, or None when it may
    not (or when this path leaves the row to it: an int where a float goes)."""
    if not 3 <= len(row) <= 6:
        return None
    name, value, step = row[0], row[1], row[2]
    if type(name) is not str or type(value) is not float or not (
            step is None or (type(step) is int and 0 <= step <= 2**53)):
        return None
    clean = _name(name)
    if clean is None:
        return None
    if len(row) == 3:  # the common row
        return _model(Metric, {"name": clean, "value": value, "step": step, "min": None,
                               "max": None, "points": ()}, set(_METRIC_BASE))
    given = set(_METRIC_BASE)
    lo = row[3]
    hi = row[4] if len(row) > 4 else None
    if lo is not None:
        if type(lo) is not float or not math.isfinite(lo) or lo > value:
            return None
        given.add("min")
    if hi is not None:
        if type(hi) is not float or not math.isfinite(hi) or hi < value:
            return None
        given.add("max")
    points: tuple[tuple[int, float], ...] = ()
    if len(row) == 6:
        flat = row[5]
        if type(flat) is not list or len(flat) % 2 or len(flat) > 2 * METRIC_POINTS_MAX:
            return None
        pairs = []
        for i in range(0, len(flat), 2):
            at, v = flat[i], flat[i + 1]
            if type(at) is not int or not 0 <= at <= 2**53 or type(v) not in (int, float) \
                    or not math.isfinite(v):
                return None
            pairs.append((at, float(v)))
        points = tuple(pairs)
        given.add("points")
    return _model(Metric, {"name": clean, "value": value, "step": step, "min": lo, "max": hi,
                           "points": points}, given)


def _window_note(n: _WindowNote) -> Any:
    given: set[str] = set()
    progress = None
    if n.progress is not UNSET:
        progress = _progress_note(n.progress)
        if progress is None or progress.final:
            return None
        given.add("progress")
    metrics: tuple[Any, ...] = ()
    if n.metrics is not UNSET:
        rows = n.metrics
        if len(rows) > METRIC_ROWS_MAX:
            return None
        out = []
        for row in rows:
            metric = _metric_row(row)
            if metric is None:
                return None
            out.append(metric)
        if len({m.name for m in out}) != len(out):
            return None
        metrics = tuple(out)
        given.add("metrics")
    base = 0
    spans: tuple[Any, ...] | None = ()
    if n.spans is not UNSET:
        if n.base_us is UNSET or len(n.spans) > SPAN_ROWS_MAX:
            return None  # (spans against the default base: the reference's)
        base = n.base_us
        if not 0 <= base <= 10**17:
            return None
        spans = _span_rows(base, n.spans)
        if spans is None:
            return None
        given.update(("base_us", "spans"))
    elif n.base_us is not UNSET:
        return None
    if progress is None and not metrics and not spans:
        return None
    return _model(Window, {"progress": progress, "metrics": metrics, "base_us": base,
                           "spans": spans}, given)


def _progress_note(n: _ProgressNote | _WindowProgress) -> Any:
    fraction, message, final, failed, workers = n.fraction, n.message, n.final, n.failed, n.workers
    if type(fraction) is not float:
        return None
    given = {"fraction"}
    if message is UNSET:
        message = ""
    else:
        given.add("message")
    if final is UNSET:
        final = False
    else:
        given.add("final")
    if failed is UNSET:
        failed = False
    else:
        given.add("failed")
    if workers is UNSET:
        workers = 0
    else:
        given.add("workers")
    fraction = _round_fraction(fraction)
    if not (0.0 <= fraction <= 1.0 and 0 <= workers <= 10_000 and (final or not failed)):
        return None
    return _model(Progress, {"fraction": fraction, "message": sanitize_text(message),
                             "final": final, "failed": failed, "workers": workers}, given)


def _link_note(cls: type[Any], name: str, field: str, url: str, web: bool) -> Any:
    clean = _name(name)
    if clean is None:
        return None
    if len(url) <= URL_LIMIT and (_PLAIN_WEB if web else _PLAIN_URI).match(url):
        value = url  # what the validator returns for such a URL: itself
    else:
        try:
            value = _web_url(url) if web else _any_uri(url)
        except Exception:
            return None
    return _model(cls, {"name": clean, field: value}, {"name", field})


# URLs of the plain shape, which the payload validators accept and return unchanged: a
# lower-case scheme they allow, a host of letters, digits, dots and hyphens (no userinfo,
# no IPv6 brackets), a port up to 65535, then only characters that need no escaping. Any
# other URL gets the validators' whole check.
_PORT = r"(?::(?:[0-5]?[0-9]{1,4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
_REST = r"(?:[/?#][A-Za-z0-9._~!$&'()*+,;=:@%/?#-]*)?\Z"
_PLAIN_WEB = re.compile(r"https?://[A-Za-z0-9.-]+" + _PORT + _REST)
_PLAIN_URI = re.compile(r"(?:s3a?|gcs?|hdfs|https?)://[A-Za-z0-9.-]+" + _PORT + _REST)


def _payload(note: str) -> tuple[Any, str, int] | None:
    """(payload, instance, seq) exactly as ``decode_envelope`` gives them, or None when this
    path does not handle the note (the reference then decides, rejection included). Raises
    on a note it cannot decode (the caller hands the line to the reference)."""
    if len(note) > NOTE_LIMIT or not note.isascii():
        return None  # a non-ASCII note may still fit, but its byte count is the reference's
    n = _decode_note(note)
    version, instance, seq = n.v, n.i, n.s
    if not (1 <= version <= SCHEMA_VERSION and type(instance) is str
            and _good_instance(instance) and type(seq) is int and 0 <= seq <= SEQ_MAX):
        return None
    tn = type(n)
    p: Any
    if tn is _SpanNote:  # the commonest note, inline
        total, lo, hi, first, last = n.total_s, n.min_s, n.max_s, n.first_start, n.last_end
        if not (type(total) is float and type(lo) is float and type(hi) is float
                and type(first) is float and type(last) is float):
            return None
        errors = n.errors
        if errors is UNSET:
            p = _span(n.name, n.count, total, lo, hi, first, last, 0, _SPAN_REQUIRED)
        else:
            p = _span(n.name, n.count, total, lo, hi, first, last, errors, _SPAN_FIELDS)
    elif tn is _ProgressNote:
        p = _progress_note(n)
    elif tn is _LinkNote:
        p = _link_note(LogLink, n.name, "url", n.url, True)
    elif tn is _DeckNote:
        p = _link_note(DeckReady, n.name, "uri", n.uri, False)
    elif tn is _WindowNote:
        p = _window_note(n)
    else:
        p = _spans_note(n)
    return None if p is None else (p, instance, seq)


def _fast(line: bytes | str) -> WatchItem | None:
    if type(line) is bytes:
        if not line.isascii():
            line.decode()  # orjson refuses invalid UTF-8 anywhere; msgspec only where it reads
    elif type(line) is not str:
        return None
    msg = _decode_line(line)
    ev = msg.object
    meta = ev.metadata
    name, ns = meta.name, meta.namespace
    if not name or not ns:
        return None
    rv = meta.resourceVersion
    if type(rv) is not str:
        rv = ""
    ct = meta.creationTimestamp
    if ct is UNSET:
        created = None
    else:
        created = _created(ct) if len(ct) <= 40 else None
        if created is None:
            return None  # an unreadable creationTimestamp: the reference's (rarer) path
    # parse_time, its common case inline: fromisoformat gives the UTC singleton for "Z" (and
    # raises on what is not a time: the reference then judges the line).
    raw_time = ev.eventTime
    t = fromisoformat(raw_time)
    event_time = t if t.tzinfo is UTC and 10 <= len(raw_time) <= 40 else parse_time(raw_time)
    if event_time is None:
        return None
    decoded = _payload(ev.note)
    if decoded is None:
        return None
    payload, instance, seq = decoded
    if ev.reason != payload.TYPE:
        return None
    reg, rel = ev.regarding, ev.related
    refs = _REFS.get((ns, reg, rel))
    if refs is None:
        refs = _refs(ns, reg, rel)
    task, sender, prefix, reg_uid = refs
    # (task and sender are None together; the name is event_name's)
    if task is None or sender is None or name != prefix + _name_digest(instance, seq):
        return None
    ann = meta.annotations
    uid = sender.uid
    parsed = _new_parsed_event(
        task, sender, payload, instance, seq, event_time, name, KIND, ev.type == "Warning",
        API_VERSION, reg_uid, rv,
        uid if type(ann) is _Ann and ann.sender_uid == uid else "", created)
    return _new_watch_item(msg.type, rv if len(rv) <= 64 else "", parsed, None, "")


# creationTimestamp has second precision: many events share one (parse_time refuses longer).
@lru_cache(maxsize=256)
def _created(ct: str) -> datetime | None:
    return parse_time(ct)


# (task, sender, the event name's prefix up to its digest, regarding uid or ""); the sender
# is None when the regarding/related pair fails a check.
_Refs = tuple[TaskRef | None, PodRef | None, str, str]
_NO_REFS: _Refs = (None, None, "", "")


# The per-sender check: one pod sends many events about one task, so the whole regarding and
# related verdict (the same checks as ``_parse``, for a TaskFeedback subject) is computed once
# per distinct (namespace, regarding, related). Only short strings enter the cache, and it is
# emptied when full: a bound, never a leak.
_REFS: dict[tuple[str, _Reg, _Rel], _Refs] = {}
_REFS_MAX = 4096


def _refs(ns: str, reg: _Reg, rel: _Rel) -> _Refs:
    out = _check_refs(ns, reg, rel)
    fields = (reg.name, reg.namespace, reg.uid, rel.name, rel.uid, rel.namespace)
    if len(ns) <= 253 and all(type(f) is not str or len(f) <= 253 for f in fields):
        if len(_REFS) >= _REFS_MAX:
            _REFS.clear()
        _REFS[(ns, reg, rel)] = out
    return out


def _check_refs(ns: str, reg: _Reg, rel: _Rel) -> _Refs:
    """``_parse``'s checks of regarding and related, for a TaskFeedback subject (the kinds
    and apiVersions are already checked by the decode)."""
    reg_name, reg_ns = reg.name, reg.namespace
    if not reg_name or len(reg_name) > 253 or (reg_ns is not UNSET and reg_ns not in (ns, "")):
        return _NO_REFS
    task = _subject(ns, reg_name)
    if task is None or not _task_id(reg_name):
        return _NO_REFS
    rel_name, rel_uid, rel_ns = rel.name, rel.uid, rel.namespace
    pod_ns = rel_ns if type(rel_ns) is str and rel_ns else ns
    if pod_ns != ns or len(pod_ns) > 253 or len(rel_name) > 253 or len(rel_uid) > 64:
        return _NO_REFS
    sender = _sender(rel_name, rel_uid, pod_ns)
    if sender is None:
        return _NO_REFS
    reg_uid = reg.uid
    return task, sender, _dns_prefix(reg_name) + ".", reg_uid if type(reg_uid) is str else ""


def fast_watch_line(line: bytes | str) -> WatchItem:
    """``parse_watch_line(line)``, faster for the common line. Never raises."""
    try:
        item = _fast(line)
    except Exception:  # whatever this path cannot read, the reference reads (and judges)
        item = None
    return parse_watch_line(line) if item is None else item
