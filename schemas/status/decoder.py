"""The ``.status`` decoder: what a TaskFeedback's status holds, read back into a ``TaskState``
entry by entry (``read_status``), the inverse of schemas/status/encoder.py's ``to_status``.

Layouts 3 (each entry of links, decks, metrics, spans, spanLanes, workers and pods one record
string, schemas/wire/record.py) and 2 (the same entries as JSON objects of the same fields, a span
name's lanes inside its entry) are read: each entry by ``record.fields_of``, whichever it is.

For every status the fold wrote, reading gives the state back. Anything else (a hand-edited or
hostile status) is read entry by entry: every entry of a map or list section (a link, deck,
metric, span, worker, pod, pod outcome or unknown type) that reads is kept, one that does not
is kept verbatim beside the state (``Unread``) and written back as it was, unless a readable
entry of the same key replaces it. An entry reads only when the encoder writes it back as a
record that reads again (``_writes``): one holding what a record cannot (``"; "`` in a pod's
name, a layout 2 value too long for a record) does not, so no stored value can make a write
fail. A part that is not an entry (the layout version, the
roster, the version vector, counters, times, the platform) and does not read makes the read
*partial*: its readers show what they can, and the watcher never writes over such a status (it
would write less than it holds). A status written under larger limits is cut by the same
smallest-keys rule the fold uses (``state.trim``), and what is cut is counted in
``*_capped``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from ..engine.observed import (
    WAITING,
    Observed,
    PlatformOutcome,
    PodVerdict,
    clean_message,
    clean_reason,
    exit_code_of,
)
from ..engine.roster import (
    FINAL,
    Failure,
    OrderKey,
    Pace,
    PodEnd,
    QuietPeriod,
    Roster,
    counts,
    epoch_ms,
    mark_bits,
    place_end,
    pod_hash,
    with_ends,
)
from ..engine.state import DEFAULT_LIMITS, Beyond, Limits, Named, SpanAgg, TaskState, new_state, us
from ..engine.version_vector import VersionVector
from ..engine.workers import ProgressState
from ..wire import history
from ..wire.caps import events_of, no_events, one_each, trim
from ..wire.constants import (
    INT64_MAX,
    MESSAGE_LIMIT,
    NAME_LIMIT,
    NON_FINITE,
    TYPE_LIMIT,
    WORKERS_MAX,
)
from ..wire.contract import FAILED, RUNNING, SUCCEEDED
from ..wire.event import TaskRef
from ..wire.kinds import NAMED_KINDS, Kind, Scalar, ValueField
from ..wire.note import valid_instance, valid_seq
from ..wire.record import (
    POD_FIELDS,
    RECORD_LIMIT,
    SEP,
    SPAN_FIELDS,
    WORKER_FIELDS,
    FieldType,
    fields_of,
)
from ..wire.text import cut_text, sanitize_text
from ..wire.times import epoch, parse_time
from .encoder import (
    COUNTER_KEYS,
    NAMED_FIELDS,
    STATUS_VERSION,
    lane_record,
    named_record,
    pod_record,
    span_record,
    worker_record,
)
from .roster_pack import unpack_roster
from .roster_text import (
    decode_ends,
    decode_lives,
    decode_marks,
    decode_other_ends,
    decode_paces,
    decode_quiet,
    roster_of,
    with_end_uids,
)

# The oldest layout still read (1, snake_case, is not: the next write replaces it).
OLDEST_READ = 2

K = TypeVar("K")
V = TypeVar("V")
# ``status.counters``'s keys -> the counters they hold.
_COUNTER_NAMES: dict[str, str] = {v: k for k, v in COUNTER_KEYS.items()}

# Problems an ``Unread`` describes one by one (the rest are counted).
PROBLEMS_SHOWN = 20


def _field(raw: Any, key: str) -> Any:
    """Field ``key`` of a list item as written, a record or an object (None: not found):
    the key of an item, even one that does not read."""
    if isinstance(raw, Mapping):
        return raw.get(key)
    if isinstance(raw, str):
        for part in raw.split(SEP):
            k, eq, v = part.partition("=")
            if eq and k == key:
                return v
    return None


# The list sections' keys: a verbatim item is written back unless the state holds its key.
def _worker_key(w: Any) -> str | None:
    pod = _field(w, "pod")
    return pod if isinstance(pod, str) else None


def _pod_key(p: Any) -> tuple[str, str] | None:
    name, uid = _field(p, "name"), _field(p, "uid")
    return (name, uid) if isinstance(name, str) and isinstance(uid, str) else None


def _verdict_key(v: Any) -> str | None:
    pod = v.get("pod") if isinstance(v, Mapping) else None
    return pod if isinstance(pod, str) else None


def _no_key(item: Any) -> None:
    return None  # (an unreadable item of paces is written back as it was)


_ITEM_KEYS: dict[str, Callable[[Any], Any]] = {
    "workers": _worker_key, "pods": _pod_key, "podOutcomes": _verdict_key,
    "waitingPods": _verdict_key, "paces": _no_key, "quiet": _no_key}


@dataclass(frozen=True, slots=True)
class Unread:
    """What a ``.status`` held that could not be read: the unreadable entries of its map
    sections (section -> key -> the entry as written) and items of its list sections
    (``workers``, ``pods``, ``podOutcomes``, ``waitingPods``), each kept verbatim; why, in a
    few lines; and whether a part that is not an entry could not be read (``partial``: never
    written over)."""

    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    items: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    partial: bool = False

    def __bool__(self) -> bool:
        return bool(self.entries or self.items or self.problems or self.partial)

    def merge_into(self, status: dict[str, Any], state: TaskState) -> dict[str, Any]:
        """``status`` (``to_status(state)``) with the unreadable entries written back as
        they were, except where ``state`` holds an entry of the same key (a fact since
        replaced it, or the byte budget left it out). Returns ``status``."""
        held: dict[str, Any] = {k.section: state.registers(k) for k in NAMED_KINDS}
        held.update({k.beyond: state.beyond.get(k.section, {}) for k in NAMED_KINDS
                     if k.beyond})
        held.update(spans=state.spans, spanLanes=state.spans, unknownTypes=state.unknown,
                    workers=state.workers,
                    pods=state.pod_events, podOutcomes=state.observed.pods,
                    waitingPods=state.observed.waiting)
        for section, raw in self.entries.items():
            kept = {k: v for k, v in raw.items() if k not in held.get(section, ())}
            if kept:
                status[section] = {**status.get(section, {}), **kept}
        for section, items in self.items.items():
            key = _ITEM_KEYS[section]
            kept_items = [v for v in items if key(v) not in held.get(section, ())]
            if kept_items:
                status[section] = [*status.get(section, []), *kept_items]
        if "links" in self.entries and "links" in status:
            status["linkCount"] = len(status["links"])
        return status


NOTHING_UNREAD = Unread()


class StatusRead(NamedTuple):
    """A ``.status`` read entry by entry: the state of what could be read, and the rest."""

    state: TaskState
    unread: Unread


class _Reading:
    """Collects what a read could not use (see ``Unread``)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.items: dict[str, list[Any]] = {}
        self.problems: list[str] = []
        self.count = 0
        self.partial = False

    def problem(self, where: str, error: Exception) -> None:
        self.count += 1
        if len(self.problems) < PROBLEMS_SHOWN:
            why = str(error) if isinstance(error, ValueError) else type(error).__name__
            self.problems.append(f"{cut_text(sanitize_text(where), 120)}: {why}")

    def entry(self, section: str, key: Any, raw: Any, error: Exception | None) -> None:
        """An entry kept as written; ``error`` why (None: it goes with another, described)."""
        self.entries.setdefault(section, {})[str(key)] = raw
        if error is not None:
            self.problem(f"{section}/{key}", error)

    def item(self, section: str, raw: Any, error: Exception) -> None:
        self.items.setdefault(section, []).append(raw)
        key = _ITEM_KEYS[section](raw)
        self.problem(f"{section}/{key if isinstance(key, str) else key[0] if key else '?'}",
                     error)

    def whole(self, part: str, error: Exception) -> None:
        self.partial = True
        self.problem(part, error)

    def result(self) -> Unread:
        if not (self.entries or self.items or self.count or self.partial):
            return NOTHING_UNREAD
        problems = self.problems
        if self.count > len(problems):
            problems = [*problems, f"and {self.count - len(problems)} more"]
        return Unread({k: dict(v) for k, v in self.entries.items()},
                      {k: tuple(v) for k, v in self.items.items()}, tuple(problems),
                      self.partial)


def read_status(task: TaskRef, status: Any, limits: Limits = DEFAULT_LIMITS) -> StatusRead:
    """The state a ``.status`` dict holds, read entry by entry, and what could not be read
    (see ``Unread``). Never raises. An empty status, or one of an older layout (version 1:
    no longer read, replaced by the next write), reads as a fresh state with nothing unread;
    another layout (a newer watcher's) as a fresh state that is ``partial``. Layout 2 (the
    previous watcher's) reads as fully as this one's."""
    if not isinstance(status, Mapping) or not status:
        return StatusRead(new_state(task, limits), NOTHING_UNREAD)
    r = _Reading()
    try:
        state = _from_status(task, status, limits, r)
    except Exception as e:  # (a reader bug: nothing of it is trusted, nothing written over)
        r.whole("status", e)
        state = new_state(task, limits)
    return StatusRead(state, r.result())


def decode_status(task: TaskRef, status: Any, limits: Limits = DEFAULT_LIMITS) -> TaskState:
    """The state of what a ``.status`` dict holds that can be read
    (``read_status`` says what could not); never raises."""
    return read_status(task, status, limits).state


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


# How much longer a record read can get when written again: its numbers and times re-spelled
# in full ("9e15" as "9000000000000000.0", 14 more characters each, up to 4 x 32 points of
# a history), the rest as it was. A shorter record needs no check (see ``_writes``).
_REWRITE_SLACK = 4096


def _writes(raw: Any, write: Callable[[], str]) -> None:
    """The entry just read (as ``raw``) is one the encoder writes (``write``) as a record that
    reads again: else (a value a record's field cannot hold, a record too long to read: a
    hand edit, or an older writer's) it is refused like any unreadable entry, kept as it was,
    and never makes a status write fail. A record (layout 3) short enough is written again
    unchecked: its fields cannot hold the separator, and it stays under the limit."""
    if isinstance(raw, str) and len(raw) <= RECORD_LIMIT - _REWRITE_SLACK:
        return
    _need(len(write()) <= RECORD_LIMIT, "too long to write as a record")


def _int(v: Any) -> int:
    _need(type(v) is int and 0 <= v <= INT64_MAX, "bad int")
    return int(v)


def _float(v: Any) -> float:
    _need(type(v) in (int, float) and math.isfinite(v) and v >= 0, "bad float")
    return float(v)


def _name(v: Any, limit: int = NAME_LIMIT) -> str:
    _need(isinstance(v, str) and 0 < len(v) <= limit, "bad name")
    return str(v)


def _key(v: Any) -> OrderKey:
    _need(isinstance(v, str), "bad order key")
    parts = v.split(" ")
    _need(len(parts) == 3 and parts[2].isascii() and parts[2].isdigit(), "bad order key")
    t = parse_time(parts[0])
    seq = int(parts[2])
    _need(t is not None and valid_instance(parts[1]) and valid_seq(seq), "bad order key")
    assert t is not None
    return (t, parts[1], seq)


def _time(v: Any) -> datetime | None:
    t = None if v is None else parse_time(v)
    _need(v is None or t is not None, "bad time")
    return t


def _scalar(v: Any, kind: str, optional: bool) -> Scalar:
    if v is None:
        _need(optional, "missing value")
        return None
    if kind == "str":
        _need(isinstance(v, str), "bad value")
        return str(v)
    if kind == "int":
        return _int(v)
    _need(type(v) in (int, float) and math.isfinite(v), "bad value")
    return float(v)


def _field_value(entry: Mapping[str, Any], f: ValueField) -> Scalar:
    if f.non_finite and f.non_finite in entry:
        token = entry[f.non_finite]
        _need(f.attr not in entry and isinstance(token, str) and token in NON_FINITE,
              "bad nonFinite value")
        return NON_FINITE[token]
    return _scalar(entry.get(f.attr), f.type, f.optional)


def _named(kind: Kind) -> Callable[[Any, Any], tuple[str, Named]]:
    fields = kind.values
    types = NAMED_FIELDS[kind.section]

    def read(k: Any, raw: Any) -> tuple[str, Named]:
        v = fields_of(raw, types)
        values = tuple(_field_value(v, f) for f in fields)
        named = Named(values[0] if len(values) == 1 else values, _key(v.get("at")),
                      _int(v.get("events")),
                      None if kind.report is None else history.from_status(v))
        _writes(raw, lambda: named_record(kind, named, types))
        return _name(k), named
    return read


def _beyond(k: Any, v: Any) -> tuple[str, Beyond]:
    """A name beyond the cap as ``beyond_text`` wrote it."""
    _need(isinstance(v, str), "not a string")
    parts = v.split(" ")
    _need(len(parts) in (4, 5), "bad entry")
    non_finite = parts[4] if len(parts) == 5 else ""
    _need(non_finite in ("", *NON_FINITE), "bad nonFinite value")
    _need(parts[3].isascii() and parts[3].isdigit() and len(parts[3]) <= 18, "bad events")
    return _name(k), Beyond(_key(" ".join(parts[:3])), non_finite, _int(int(parts[3])))


def _entries(st: Mapping[str, Any], section: str, r: _Reading,
             read: Callable[[Any, Any], tuple[K, V]]) -> dict[K, V]:
    """The readable entries of the map section ``section``; the others go to ``r``."""
    data = st.get(section, {})
    out: dict[K, V] = {}
    if not isinstance(data, Mapping):
        r.whole(section, ValueError("not a map"))
        return out
    for k, v in data.items():
        try:
            key, value = read(k, v)
        except Exception as e:
            r.entry(section, k, v, e)
            continue
        out[key] = value
    return out


def _items(st: Mapping[str, Any], section: str, r: _Reading,
           read: Callable[[Any], tuple[K, V]]) -> dict[K, V]:
    """The readable items of the list section ``section``, by key; the others go to ``r``."""
    data = st.get(section, [])
    out: dict[K, V] = {}
    if not isinstance(data, list):
        r.whole(section, ValueError("not a list"))
        return out
    for item in data:
        try:
            key, value = read(item)
        except Exception as e:
            r.item(section, item, e)
            continue
        out[key] = value
    return out


def _part(r: _Reading, part: str, read: Callable[[], V], fallback: V) -> V:
    """``read()``, or ``fallback`` when the part does not read (the read is then partial)."""
    try:
        return read()
    except Exception as e:
        r.whole(part, e)
        return fallback


def _trim_lanes(spans: dict[str, SpanAgg], cap: int) -> dict[str, SpanAgg]:
    """Lanes beyond ``cap`` (a status written under a larger one) cut by the fold's rule:
    the smallest (name, pod) pairs stay; the others' summaries count in ``unlaned``."""
    pairs = sorted((name, pod) for name, s in spans.items() for pod in s.lanes)
    if len(pairs) <= cap:
        return spans
    out = dict(spans)
    for name, pod in pairs[max(cap, 0):]:
        s = out[name]
        lanes = dict(s.lanes)
        gone = lanes.pop(pod)
        out[name] = s.with_lanes(lanes, s.unlaned + gone.events)
    return out


def _worker(raw: Any) -> tuple[str, ProgressState]:
    w = fields_of(raw, WORKER_FIELDS)
    frac = _float(w.get("fraction"))
    msg = w.get("message", "")
    final, failed = w.get("final", False), w.get("failed", False)
    _need(frac <= 1.0 and isinstance(msg, str) and len(msg) <= MESSAGE_LIMIT, "bad worker")
    _need(type(final) is bool and type(failed) is bool and (final or not failed), "bad worker")
    first_at = w.get("firstAt")
    first_fraction = 0.0
    if first_at is not None:
        first_fraction = _float(w.get("firstFraction"))
        _need(first_fraction <= 1.0, "bad worker")
    pod = _name(w.get("pod"), 253)
    progress = ProgressState(
        frac, msg, final, _key(w.get("at")), failed, _int(w.get("workers", 0)),
        _int(w.get("events")), None if first_at is None else _key(first_at), first_fraction
    )
    _writes(raw, lambda: worker_record(pod, progress))
    return pod, progress


def _roster(data: Any, workers: Mapping[str, ProgressState], lim: Limits
            ) -> tuple[Roster, int]:
    """The roster a status holds (or, in a status from before it, the one its detailed
    workers imply), cut to the roster cap; and how many events the cut gave up."""
    if data is None:
        return roster_of((pod, w.fraction, w.final, w.failed, w.workers, w.at, w.message,
                          w.events) for pod, w in workers.items()), 0
    _need(isinstance(data, Mapping), "bad roster")
    packed = data.get("packed")
    if packed is None:
        raw = data.get("marks")
        _need(isinstance(raw, str), "bad roster")
        every = decode_marks(raw)
    else:  # (the same facts, packed for the status budget: never beside the fields)
        _need(isinstance(packed, str) and not any(
            k in data for k in ("marks", "livesFrom", "lives", "outcomes", "outcomeUids",
                                "otherOutcomes")), "bad roster")
        every, packed_lives, packed_ends, packed_others = unpack_roster(packed)
    marks, cut = trim(every, lim.roster, events_of)
    declared = _int(data.get("declared", 0))
    _need(declared <= WORKERS_MAX, "bad roster")
    first: Failure | None = None
    raw_first = data.get("firstFailure")
    if raw_first is not None:
        _need(isinstance(raw_first, Mapping), "bad roster")
        message = raw_first.get("message", "")
        _need(isinstance(message, str) and len(message) <= MESSAGE_LIMIT, "bad roster")
        first = Failure(_key(raw_first.get("at")), _name(raw_first.get("pod"), 253), message)
    last = data.get("lastFinal")
    finals, failures, permyriads = counts(marks)
    _need((first is not None or not failures) and (last is not None or not finals),
          "bad roster")
    if packed is None:
        raw_ends = data.get("outcomes", "")
        _need(isinstance(raw_ends, str), "bad roster")
        raw_uids = data.get("outcomeUids", "")
        _need(isinstance(raw_uids, str), "bad roster")
        every_end = with_end_uids(decode_ends(raw_ends), raw_uids)
        # The life of each mark (none in an older writer's status: the next report adopts
        # it).
        raw_lives = data.get("lives", "")
        _need(isinstance(raw_lives, str), "bad roster")
        packed_lives = {} if not raw_lives else decode_lives(
            raw_lives, data.get("livesFrom", 0), every)
        raw_others = data.get("otherOutcomes", "")
        _need(isinstance(raw_others, str), "bad roster")
        packed_others = decode_other_ends(raw_others)
    else:
        every_end = packed_ends
    ends, _ = trim(every_end, lim.roster, no_events)
    lives = {h: life for h, life in packed_lives.items() if h in marks}
    # The ends of the other lives of a name (each name's end then picked as the fold does).
    others: dict[int, Mapping[int, PodEnd]] = {
        h: p for h, p in packed_others.items() if h in ends}
    for h in list(others):
        place_end(ends, others, h, lives.get(h))
    return with_ends(Roster(marks, declared, finals, failures, permyriads, first,
                            None if last is None else _key(last), lives=lives,
                            other_ends=others), ends), cut


def _paces(st: Mapping[str, Any], roster: Roster, workers: Mapping[str, ProgressState],
           r: _Reading) -> dict[int, Pace]:
    """The paces of the roster's running pods: those ``paces`` holds (an unreadable item goes
    to ``r``), and for a detailed worker whose pace the status lacks (its budget left it
    out, or it was written before paces), the pace its record implies. A running pod with
    neither is not judged (schemas/status/health.py says how many)."""
    data = st.get("paces", [])
    marks = roster.marks
    out: dict[int, Pace] = {}
    if not isinstance(data, list):
        r.whole("paces", ValueError("not a list"))
        data = []
    for item in data:
        try:
            _need(isinstance(item, str), "bad pace")
            paces = decode_paces(item)
        except Exception as e:
            r.item("paces", item, e)
            continue
        out.update((h, p) for h, p in paces.items()
                   if h in marks and not marks[h].bits & FINAL)
    for pod, w in workers.items():
        h = pod_hash(pod)
        m = marks.get(h)
        if h in out or m is None or m.bits & FINAL or w.final:
            continue
        first_at, first_fraction = (w.at, w.fraction) if w.first_at is None \
            else (w.first_at, w.first_fraction)
        first_ms, first_pm = epoch_ms(first_at[0]), mark_bits(first_fraction, False, False)
        out[h] = Pace(pod, w.events, first_ms, first_pm, epoch_ms(w.at[0]),
                      mark_bits(w.fraction, False, False), epoch_ms(w.at[0]), first_ms,
                      first_pm)
    return out


def _quiet(st: Mapping[str, Any], roster: Roster, lim: Limits, r: _Reading
           ) -> dict[int, QuietPeriod]:
    """The quiet periods ``quiet`` holds of pods without a final (an unreadable item goes to
    ``r``), the ``roster`` cap smallest pods."""
    data = st.get("quiet", [])
    if not isinstance(data, list):
        r.whole("quiet", ValueError("not a list"))
        return {}
    out: dict[int, QuietPeriod] = {}
    marks = roster.marks
    for item in data:
        try:
            _need(isinstance(item, str), "bad quiet period")
            h, q = decode_quiet(item)
        except Exception as e:
            r.item("quiet", item, e)
            continue
        m = marks.get(h)
        if m is None or not m.bits & FINAL:
            cur = out.get(h)
            out[h] = q if cur is None or q > cur else cur
    if len(out) > lim.roster:
        out = dict(sorted(out.items())[:lim.roster])
    return out


def _observed(st: Mapping[str, Any], lim: Limits, r: _Reading) -> Observed:
    """``podOutcomes``, ``waitingPods`` and ``platform`` as ``_observed_json`` wrote them,
    entry by entry (an unreadable verdict goes to ``r``; an unreadable platform makes the
    read partial)."""
    pods = _items(st, "podOutcomes", r, lambda v: _pod_verdict(v, "at", True))
    waiting = _items(st, "waitingPods", r, lambda v: _pod_verdict(v, "since", False))
    pods, _ = trim(pods, lim.observed_pods, no_events)
    waiting, _ = trim(waiting, lim.waiting, no_events)
    platform = _part(r, "platform", lambda: _platform(st.get("platform")), None)
    count = st.get("waitingCount")
    more = count - len(waiting) if type(count) is int and len(waiting) < count < 2**31 else 0
    running = st.get("runningPods")
    if type(running) is not int or not 0 < running < 2**31:
        return Observed(pods, waiting, platform, waiting_more=more)
    return Observed(pods, waiting, platform, running, parse_time(st.get("runningSince")),
                    more)


def _platform(raw_p: Any) -> PlatformOutcome | None:
    if raw_p is None:
        return None
    _need(isinstance(raw_p, Mapping), "bad platform")
    f = {k: raw_p.get(k, "") for k in ("apiVersion", "kind", "name", "uid", "phase",
                                      "reason", "message")}
    _need(all(isinstance(x, str) and len(x) <= 320 for x in f.values())
          and f["phase"] in (RUNNING, SUCCEEDED, FAILED) and bool(f["name"]),
          "bad platform")
    return PlatformOutcome(f["apiVersion"], f["kind"], f["name"], f["uid"],
                           f["phase"], clean_reason(f["reason"]),
                           clean_message(f["message"]), _time(raw_p.get("at")))


def _pod_verdict(v: Any, time_key: str, terminal: bool) -> tuple[str, PodVerdict]:
    verdict = _verdict(v, time_key, terminal)
    return verdict.pod, verdict


def _verdict(v: Any, time_key: str, terminal: bool) -> PodVerdict:
    _need(isinstance(v, Mapping), "bad pod outcome")
    phase = v.get("phase", WAITING) if terminal else WAITING
    _need(phase in ((SUCCEEDED, FAILED) if terminal else (WAITING,)), "bad pod outcome")
    uid, reason, message = v.get("uid", ""), v.get("reason", ""), v.get("message", "")
    explained = v.get("explained", True)
    _need(isinstance(uid, str) and len(uid) <= 64 and type(explained) is bool
          and isinstance(reason, str) and isinstance(message, str), "bad pod outcome")
    code = v.get("exitCode")
    _need(code is None or exit_code_of(code) is not None, "bad pod outcome")
    at = _time(v.get(time_key))
    _need(at is not None, "bad pod outcome")
    assert at is not None
    return PodVerdict(_name(v.get("pod"), 253), uid, phase, clean_reason(reason),
                      clean_message(message), code, at, explained)


def _spans(st: Mapping[str, Any], r: _Reading) -> dict[str, SpanAgg]:
    """``spans`` with each name's lanes (its ``spanLanes`` entry, or layout 2's ``pods``), the
    readable ones; an unreadable name goes to ``r`` with its lanes, as do lanes of no name."""
    lanes = st.get("spanLanes", {})
    if not isinstance(lanes, Mapping):
        r.whole("spanLanes", ValueError("not a map"))
        lanes = {}

    def read(k: Any, raw: Any) -> tuple[str, SpanAgg]:
        try:
            own = lanes.get(k)
            span = _span_entry(fields_of(raw, SPAN_FIELDS), own)
            _writes(raw, lambda: span_record(span))
            for pod, lane in span.lanes.items():
                # (No lanes of its own: the one lane is the entry itself, its ``pod``.)
                _writes(own.get(pod) if isinstance(own, Mapping) else raw,
                        lambda: lane_record(lane))  # noqa: B023 (called at once)
            return _name(k), span
        except Exception:
            if k in lanes:
                r.entry("spanLanes", k, lanes[k], None)
            raise

    spans = _entries(st, "spans", r, read)
    data = st.get("spans", {})
    for k, raw in lanes.items():
        if not isinstance(data, Mapping) or k not in data:
            r.entry("spanLanes", k, raw, ValueError("lanes of no span name"))
    return spans


def _pod(raw: Any) -> tuple[tuple[str, str], int]:
    p = fields_of(raw, POD_FIELDS)
    name, uid, events = _name(p.get("name"), 253), _name(p.get("uid"), 64), _int(p.get("events"))
    _writes(raw, lambda: pod_record(name, uid, events))
    return (name, uid), events


def _unknown_type(k: Any, c: Any) -> tuple[str, int]:
    return _name(k, TYPE_LIMIT), _int(c)


def _counters(raw: Any, r: _Reading) -> tuple[dict[str, int], int]:
    counters = dict.fromkeys(COUNTER_KEYS, 0)
    warnings = 0
    if not isinstance(raw, Mapping):
        r.whole("counters", ValueError("not a map"))
        return counters, warnings
    for k, v in raw.items():
        if k in _COUNTER_NAMES or k == "warnings":
            try:
                n = _int(v)
            except ValueError as e:
                r.whole(f"counters.{k}", e)
                continue
            if k == "warnings":
                warnings = n
            else:
                counters[_COUNTER_NAMES[k]] = n
    return counters, warnings


def _from_status(task: TaskRef, st: Mapping[str, Any], lim: Limits, r: _Reading) -> TaskState:
    version = st.get("schemaVersion")
    if type(version) is not int or not OLDEST_READ <= version <= STATUS_VERSION:
        if not (type(version) is int and 1 <= version < OLDEST_READ):
            r.whole("schemaVersion", ValueError(
                f"layout {str(version)[:20]!r}, not {STATUS_VERSION}"))
        return new_state(task, lim)  # (an older layout is no longer read: replaced)
    named = {k.section: _entries(st, k.section, r, _named(k)) for k in NAMED_KINDS}
    beyond = {k.section: _entries(st, k.beyond, r, _beyond) for k in NAMED_KINDS if k.beyond}
    spans = _spans(st, r)
    workers = _items(st, "workers", r, _worker)
    pods = _items(st, "pods", r, _pod)
    unknown = _entries(st, "unknownTypes", r, _unknown_type)
    counters, warnings = _counters(st.get("counters", {}), r)
    no_times: dict[str, int] = {}
    applied, times = _part(r, "applied", lambda: VersionVector.parse_text(st.get("applied", "")),
                           (VersionVector(), no_times))
    wm = _part(r, "compactedBefore", lambda: _time(st.get("compactedBefore")), None)
    watermark = 0 if wm is None else epoch(wm)

    for kind in NAMED_KINDS:
        entries, extra = trim(named.pop(kind.section), getattr(lim, kind.cap), events_of)
        if entries:
            named[kind.section] = entries
        counters[kind.capped] += extra
        if kind.beyond:
            # (A name both kept and beyond, by a hand edit: the register is the truth.)
            kept, lost = trim({k: v for k, v in beyond.pop(kind.section).items()
                               if k not in entries}, lim.beyond, events_of)
            if kept:
                beyond[kind.section] = kept
            counters[kind.unjudged] += lost
    spans, c3 = trim(spans, lim.spans, events_of)
    spans = _trim_lanes(spans, lim.span_lanes)
    pods, c4 = trim(pods, lim.pods, one_each)
    unknown, c5 = trim(unknown, lim.unknown_types, one_each)
    workers, c6 = trim(workers, lim.workers, events_of)
    raw_roster = st.get("roster")
    if raw_roster is None and "workers" in r.items:
        # The roster these workers imply would miss the unreadable ones.
        r.whole("roster", ValueError("absent, and a worker is unreadable"))
    try:
        roster, c7 = _roster(raw_roster, workers, lim)
    except Exception as e:
        r.whole("roster", e)
        roster, c7 = _roster(None, workers, lim)  # (shown, never written: the read is partial)
    roster = roster._replace(paces=_paces(st, roster, workers, r),
                             quiet=_quiet(st, roster, lim, r))
    for name, extra in (
        ("spans_capped", c3),
        ("pods_capped", c4),
        ("unknown_capped", c5),
        ("workers_capped", c6),
        ("roster_capped", c7),
    ):
        counters[name] += extra
    return TaskState(
        task=task,
        named=named,
        spans=spans,
        workers=workers,
        pod_events=pods,
        applied=applied,
        instance_times=times,
        watermark=watermark,
        first_event_time=_part(r, "firstEventTime", lambda: _time(st.get("firstEventTime")),
                               None),
        last_event_time=_part(r, "lastEventTime", lambda: _time(st.get("lastEventTime")),
                              None),
        counters=counters,
        unknown=unknown,
        warnings=warnings,
        roster=roster,
        observed=_observed(st, lim, r),
        limits=lim,
        beyond=beyond,
    )


def _lane(raw: Any) -> SpanAgg:
    lane = fields_of(raw, SPAN_FIELDS)
    _need("pod" not in lane and "unlaned" not in lane and "pods" not in lane, "bad span lane")
    return _agg(lane)


def _agg(s: Any) -> SpanAgg:
    _need(isinstance(s, Mapping), "bad span")
    first_start = _float(s.get("firstStart"))
    shift, windows = _parse_windows(s.get("windows", "0 "), first_start)
    return SpanAgg(_int(s.get("count")), _int(s.get("totalNs")), _float(s.get("minS")),
                   _float(s.get("maxS")), first_start, _float(s.get("lastEnd")),
                   _int(s.get("errors")), _int(s.get("events")), shift, windows)


def _span_entry(s: Mapping[str, Any], own_lanes: Any) -> SpanAgg:
    """A span name's entry (see ``_span_json``) with its lanes: ``own_lanes``, the name's
    entry of ``spanLanes`` (layout 3), or the entry's ``pods`` (layout 2)."""
    total = _agg(s)
    unlaned = _int(s.get("unlaned", 0))
    pod = s.get("pod")
    raw = s.get("pods", own_lanes)
    if pod is not None:
        _need(not unlaned and raw is None, "bad span lanes")
        lanes: dict[str, SpanAgg] = {_name(pod, 253): total}
    else:
        raw = {} if raw is None else raw
        _need(isinstance(raw, Mapping) and ("pods" not in s or own_lanes is None),
              "bad span lanes")
        lanes = {_name(p, 253): _lane(lane) for p, lane in raw.items()}
    if not lanes and not unlaned:
        return total
    return total.with_lanes(lanes, unlaned)


def _parse_windows(text: Any, first_start: float) -> tuple[int, tuple[tuple[int, int], ...]]:
    _need(isinstance(text, str), "bad windows")
    head, _, body = text.partition(" ")
    _need(head.isascii() and head.isdigit() and len(head) <= 2, "bad windows")
    shift = int(head)
    base = us(first_start) >> shift
    out: list[tuple[int, int]] = []
    for part in body.split(",") if body else []:
        lo, _, hi = part.partition("-")
        _need(lo.isdigit() and hi.isdigit() and len(lo) <= 6 and len(hi) <= 6, "bad windows")
        out.append((base + int(lo), base + int(hi)))
    return shift, tuple(out)


def expanded(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` with every record read into its fields, in the shape layout 2 wrote (a
    metric's history ``{shift, steps, values}``, a span name's lanes in its entry's ``pods``):
    what ``tidings state -o json`` prints, so a script reads fields, not record strings. An
    entry that does not read (a hand edit) stays as it is (``read_status`` says why)."""

    def read(raw: Any, types: Mapping[str, FieldType]) -> Any:
        try:
            entry = dict(fields_of(raw, types))
            if isinstance(entry.get("history"), str):
                s = history.from_status(entry)
                entry["history"] = {"shift": s.shift, "steps": list(s.steps),
                                    "values": list(s.values)}
        except ValueError:
            return raw
        return entry

    out = dict(status)
    for section, types in NAMED_FIELDS.items():
        if isinstance(status.get(section), Mapping):
            out[section] = {k: read(v, types) for k, v in status[section].items()}
    lanes = out.pop("spanLanes", None)
    if isinstance(status.get("spans"), Mapping):
        spans = {k: read(v, SPAN_FIELDS) for k, v in status["spans"].items()}
        for name, by_pod in lanes.items() if isinstance(lanes, Mapping) else ():
            entry = spans.get(name)
            if isinstance(entry, dict) and isinstance(by_pod, Mapping) and "pods" not in entry:
                entry["pods"] = {p: read(v, SPAN_FIELDS) for p, v in by_pod.items()}
            else:  # (lanes of no readable name: kept where they were)
                out.setdefault("spanLanes", {})[name] = by_pod
        out["spans"] = spans
    elif lanes is not None:
        out["spanLanes"] = lanes
    for section, types in (("workers", WORKER_FIELDS), ("pods", POD_FIELDS)):
        if isinstance(status.get(section), list):
            out[section] = [read(v, types) for v in status[section]]
    return out
