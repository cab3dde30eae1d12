"""The ``.status`` encoder: a folded state as the camelCase, structural status deploy/crd.yaml
documents (``to_status``), cut to a byte budget by giving up detail in ``BUDGET_DROP_ORDER``.

Empty maps, zero counters and absent values are left out. Health is not judged here: who
writes or shows a status judges it (schemas/status/health.py's ``judge``, at a time) and hands the
judgment in; encoding a state to keep it (the watcher's compacted tasks) judges nothing. The
inverse is schemas/status/decoder.py; the layout is summed up in ``tidings.schemas``'s
docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from ..engine.completion import TaskProgress, aggregate, outcome_conditions, percent
from ..engine.observed import Observed, PodVerdict
from ..engine.roster import OrderKey, Roster
from ..engine.state import COUNTER_NAMES, Beyond, Named, SpanAgg, TaskState, us
from ..engine.workers import ProgressState
from ..wire import history, record
from ..wire.contract import FAILED
from ..wire.kinds import BUDGET_RANKED, NAMED_KINDS, Kind
from ..wire.payloads import non_finite_text
from ..wire.record import POD_FIELDS, SPAN_FIELDS, WORKER_FIELDS, FieldType, pack
from ..wire.times import format_seconds, format_time, from_epoch
from .roster_pack import pack_roster
from .roster_text import (
    encode_end_uids,
    encode_ends,
    encode_lives,
    encode_marks,
    encode_other_ends,
    encode_paces,
    encode_quiet,
)

if TYPE_CHECKING:
    from .health import Judgment

# The layout version of ``.status``: 3 writes each entry of the record sections (links, decks,
# metrics, spans and their lanes, workers, sender pods) as one string (schemas/wire/record.py);
# 2 wrote them as JSON objects of the same fields (still read); 1 was the snake_case layout
# (no longer read).
STATUS_VERSION = 3
# The byte budget of a whole written status (JSON, UTF-8), the roster included, far below
# etcd's 1.5 MB request limit: the API server's CPU per status write grows with its bytes
# (about 0.2 ms/KB in bench/bench_status_write.py), so this bounds the cost of a write at
# every cap (~80 ms at the largest). Of it, everything but the roster's per-pod facts takes
# at most ``DETAIL_BUDGET`` (what the drop order gives up to); the roster, never dropped,
# takes the rest: past ``PACK_FROM`` entries its per-pod facts are written packed
# (``roster.packed``, schemas/engine/roster.py's ``pack_roster``: about 15 bytes a pod, so the
# roster's cap of 20,000 pods fits in ~300 KiB, running or ended; bench/bench_roster_scale.py).
STATUS_BUDGET = 384 * 1024
DETAIL_BUDGET = 64 * 1024
# The roster's per-pod entries (marks, ends, other lives' ends) past which they are packed
# (below it a status is written as it always was: the fields of 512 pods take ~10-20 KiB).
PACK_FROM = 512


class Drop(NamedTuple):
    """One step of the budget: what ``budgetDropped`` counts it as, the status section it
    cuts, and the field of each entry it gives up ("": the entries themselves)."""

    name: str
    section: str
    detail: str = ""


# What ``to_status(budget=...)`` gives up, in this order, while the status is over budget:
# the sender pods and the pods' outcomes first, then each kind's section by its
# ``drop_rank``, or the detail of its entries by its ``detail_rank`` (schemas/wire/kinds.py,
# ``BUDGET_RANKED``), with the running workers' paces (``paces``, what a restarted watcher
# judges health by: the roster's marks say who reports, the paces how) after the metrics'
# histories and before any metric, span, deck or link a person reads. Dedup data, phase,
# conditions, health, progress, workers, the roster and counters are never dropped. Entries
# go from the end of a section (the largest names first), a section at a time;
# ``workerMessages`` empties the workers' messages (their progress stays), ``metricHistory``
# the metrics' histories (their values and extremes stay), ``spanLanes`` the span names'
# lanes (their totals stay); ``paces`` counts items of up to ``PACES_PER_ITEM`` workers.
PACES_DROP_RANK = 32
BUDGET_DROPS: tuple[Drop, ...] = (
    Drop("pods", "pods"), Drop("podOutcomes", "podOutcomes"),
    *(Drop(*step) for _, step in sorted(
        [*BUDGET_RANKED, (PACES_DROP_RANK, ("paces", "paces", ""))])))
BUDGET_DROP_ORDER: tuple[str, ...] = tuple(d.name for d in BUDGET_DROPS)
# Room for the budgetDropped field itself.
_DROPPED_RESERVE = 160


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


# Each counter's key in ``status.counters``.
COUNTER_KEYS: dict[str, str] = {k: _camel(k) for k in COUNTER_NAMES}

_FIELD_TYPES: dict[str, FieldType] = {"str": "text", "float": "float", "int": "int"}


def named_fields(kind: Kind) -> dict[str, FieldType]:
    """The record of a named kind's entry: its value fields (a string one is the record's
    text, last), ``at`` and ``events``, and for a kind with a curve ``min``, ``max`` and
    ``history`` (last, what the budget gives up first)."""
    fields: list[tuple[str, FieldType]] = []
    for f in kind.values:
        fields.append((f.attr, _FIELD_TYPES[f.type]))
        if f.non_finite:
            fields.append((f.non_finite, "str"))
    fields += [("at", "str"), ("events", "int")]
    if kind.report is not None:
        fields += [("min", "float"), ("max", "float"), ("history", "str")]
    return record.types_of(fields)


NAMED_FIELDS: dict[str, dict[str, FieldType]] = {k.section: named_fields(k) for k in NAMED_KINDS}


def to_status(state: TaskState, budget: int | None = None, *,
              health: Judgment | None = None) -> dict[str, Any]:
    """The JSON-safe ``.status`` dict: camelCase, structural (deploy/crd.yaml documents
    every field); empty maps, zero counters and absent values are left out. ``health``, the
    state's health as ``health.judge`` made it, goes after the outcome's conditions and in
    ``status.health`` (None: the status says nothing of health). A status with no condition
    (nothing folded or observed yet) has no health either.

    With ``budget`` (bytes), entries are dropped in ``BUDGET_DROP_ORDER`` (from the end of
    each section, the largest names first) while the encoded status is larger, and
    ``budgetDropped`` counts what went per section (the in-memory state keeps it all; only
    the written copy is cut). Phase, conditions, progress, the workers' progress, counters,
    the roster and the version vector are never dropped.

    ``budget`` bounds the whole status; what the drop order gives up to is the status but
    the roster's per-pod facts, held to ``min(budget, DETAIL_BUDGET)``, and those facts are
    packed (``roster.packed``) once they pass ``PACK_FROM`` entries."""
    r = state.roster
    pack = budget is not None and len(r.marks) + len(r.ends) + sum(
        len(p) for p in r.other_ends.values()) > PACK_FROM
    st = _status(state, health, pack)
    if budget is None:
        return st
    # (The packed facts' bytes: the roster's share, not the detail's.)
    packed = len(st["roster"]["packed"]) if pack else 0
    share = min(budget, DETAIL_BUDGET)
    size = len(orjson.dumps(st)) + _DROPPED_RESERVE
    dropped: dict[str, int] = {}
    for drop in BUDGET_DROPS:
        if size <= budget and size - packed <= share:
            break
        section, detail = drop.section, drop.detail
        entries = st.get(section)
        if not entries:
            continue
        n = 0
        keys = list(range(len(entries))) if isinstance(entries, list) else list(entries)
        for key in reversed(keys):
            if size <= budget and size - packed <= share:
                break
            if detail:  # the last field of each entry's record, the entries stay
                entry = entries[key]
                cut = record.without(entry, detail)
                if cut != entry:
                    entries[key] = cut
                    size -= len(entry.encode()) - len(cut.encode())
                    n += 1
                continue
            value = entries.pop(key)
            size -= len(orjson.dumps(value)) + (
                1 if isinstance(entries, list) else len(orjson.dumps(key)) + 2)
            n += 1
        if not entries:
            del st[section]
        if n:
            dropped[drop.name] = n
    if dropped:
        st["budgetDropped"] = dropped
    return st


def status_reason(phase: str, conditions: list[dict[str, Any]]) -> str:
    """``status.reason``, a word for the printer column as a Pod's status.reason is: why
    the task is where it is when that is news (the first waiting pod's reason, such as
    ImagePullBackOff or Unschedulable; a failed task's reason, such as
    BackoffLimitExceeded); empty otherwise."""
    by_type = {c["type"]: c for c in conditions}
    ready = by_type.get("PodsReady")
    if ready is not None and ready["status"] == "False" \
            and ready["reason"] not in ("PodsPending", "TaskFailed"):
        return str(ready["reason"])
    failed = by_type.get("Failed")
    if phase == FAILED and failed is not None and failed["status"] == "True":
        return str(failed["reason"])
    return ""


def _status(state: TaskState, health: Judgment | None, pack: bool = False) -> dict[str, Any]:
    phase = state.phase
    st: dict[str, Any] = {"schemaVersion": STATUS_VERSION, "phase": phase}
    conditions = outcome_conditions(state, phase)
    reason = status_reason(phase, conditions)
    if reason:
        st["reason"] = reason
    if conditions:
        if health is None:
            st["conditions"] = conditions
        else:
            st["conditions"] = conditions + health.conditions
            st["health"] = dict(health.health)
    agg = aggregate(state, phase)
    if agg is not None:
        st["progress"] = _progress_json(agg, phase)
    st["linkCount"] = len(state.link_entries)
    deck = state.latest_deck
    if deck is not None:
        st["deck"] = deck
    named = state.named
    for kind in NAMED_KINDS:
        entries = named.get(kind.section)
        if entries:
            types = NAMED_FIELDS[kind.section]
            st[kind.section] = {k: named_record(kind, v, types)
                                for k, v in sorted(entries.items())}
        beyond = state.beyond.get(kind.section) if kind.beyond else None
        if beyond:
            st[kind.beyond] = {k: beyond_text(v) for k, v in sorted(beyond.items())}
    if state.spans:
        st["spans"] = {k: span_record(s) for k, s in sorted(state.spans.items())}
        lanes = {k: {pod: lane_record(lane) for pod, lane in sorted(s.lanes.items())}
                 for k, s in sorted(state.spans.items()) if _own_lanes(s)}
        if lanes:
            st["spanLanes"] = lanes
    if state.workers:
        st["workers"] = [worker_record(k, w) for k, w in sorted(state.workers.items())]
    if state.roster.marks or state.roster.ends:
        st["roster"] = _roster_json(state.roster, pack)
    if state.roster.paces:
        st["paces"] = encode_paces(state.roster.paces)
    if state.roster.quiet:
        st["quiet"] = encode_quiet(state.roster.quiet)
    _observed_json(state.observed, st)
    if state.pod_events:
        st["pods"] = [pod_record(n, u, c) for (n, u), c in sorted(state.pod_events.items())]
    if state.unknown:
        st["unknownTypes"] = dict(sorted(state.unknown.items()))
    counters = {COUNTER_KEYS[k]: v for k in COUNTER_NAMES if (v := state.counters.get(k, 0))}
    if state.warnings:
        counters["warnings"] = state.warnings
    if counters:
        st["counters"] = counters
    if state.first_event_time is not None:
        st["firstEventTime"] = format_time(state.first_event_time)
    if state.last_event_time is not None:
        st["lastEventTime"] = format_time(state.last_event_time)
    applied = state.applied.to_text(state.instance_times)
    if applied:
        st["applied"] = applied
    if state.watermark:
        st["compactedBefore"] = format_seconds(from_epoch(state.watermark))
    return st


# Each record section's entry as the record written: the decoder writes every entry it reads
# with these as well, and refuses one that would not be written back as it reads.
def named_record(kind: Kind, v: Named, types: dict[str, FieldType] | None = None) -> str:
    """A register's entry of its kind's section."""
    return pack(_named_json(kind, v), NAMED_FIELDS[kind.section] if types is None else types)


def span_record(s: SpanAgg) -> str:
    """A span name's entry of ``spans``."""
    return pack(_span_json(s), SPAN_FIELDS)


def lane_record(lane: SpanAgg) -> str:
    """One pod's lane of a span name, an entry of ``spanLanes``."""
    return pack(_agg_json(lane), SPAN_FIELDS)


def worker_record(pod: str, w: ProgressState) -> str:
    """A worker's entry of ``workers``."""
    return pack(_worker_json(pod, w), WORKER_FIELDS)


def pod_record(name: str, uid: str, events: int) -> str:
    """A sender pod's entry of ``pods``."""
    return pack({"name": name, "uid": uid, "events": events}, POD_FIELDS)


def _windows_text(s: SpanAgg) -> str:
    """``"<shift> lo-hi,lo-hi"`` with bucket numbers relative to the first start's bucket."""
    base = us(s.first_start) >> s.shift
    return f"{s.shift} " + ",".join(f"{lo - base}-{hi - base}" for lo, hi in s.windows)


def _alone(s: SpanAgg) -> str | None:
    """The one pod that sent every summary of the name, when its lane is the entry itself."""
    if len(s.lanes) == 1 and not s.unlaned:
        ((pod, lane),) = s.lanes.items()
        # (A name only a hand edit gives a pod, one a record's field cannot hold, stays a
        # lane of ``spanLanes``, where it is a key.)
        if lane == s.totals and record.SEP not in pod:
            return pod
    return None


def _own_lanes(s: SpanAgg) -> bool:
    """Whether the name's lanes go in ``spanLanes`` (not only ``pod`` in its entry)."""
    return bool(s.lanes) and _alone(s) is None


def _span_json(s: SpanAgg) -> dict[str, Any]:
    """A span name's entry: its aggregate, ``unlaned``, and ``pod`` when one pod sent every
    summary of the name (its lane is the entry itself); else its lanes, by pod, are the
    name's entry of ``spanLanes``."""
    out = _agg_json(s)
    if s.unlaned:
        out["unlaned"] = s.unlaned
    pod = _alone(s)
    if pod is not None:
        out["pod"] = pod
    return out


def _agg_json(s: SpanAgg) -> dict[str, Any]:
    return {"count": s.count, "totalNs": s.total_ns, "minS": s.min_s, "maxS": s.max_s,
            "firstStart": s.first_start, "lastEnd": s.last_end, "errors": s.errors,
            "events": s.events, "windows": _windows_text(s)}


def _named_json(kind: Kind, v: Named) -> dict[str, Any]:
    """A register's status entry: its value fields (an absent optional one left out), then
    ``at`` and ``events``."""
    fields = kind.values
    out: dict[str, Any] = {}
    values = v.value if isinstance(v.value, tuple) else (v.value,)
    for f, x in zip(fields, values, strict=True):
        if x is None:
            continue
        text = non_finite_text(x) if f.non_finite and type(x) is float else None
        if text is None:
            out[f.attr] = x
        else:
            out[f.non_finite] = text
    out["at"] = key_text(v.at)
    out["events"] = v.events
    if v.series is not None:
        out.update(history.to_status(v.series))
    return out


def beyond_text(b: Beyond) -> str:
    """A name beyond the cap as one string: ``<order key> <events>``, then its latest
    value's spelling when that was not finite (``... 3 NaN``)."""
    text = f"{key_text(b.at)} {b.events}"
    return f"{text} {b.non_finite}" if b.non_finite else text


def key_text(k: OrderKey) -> str:
    """The order key as one string: ``<eventTime> <instance> <seq>``."""
    return f"{format_time(k[0])} {k[1]} {k[2]}"


def _worker_json(pod: str, w: ProgressState) -> dict[str, Any]:
    out: dict[str, Any] = {"pod": pod, "fraction": w.fraction}
    if w.message:
        out["message"] = w.message
    if w.final:
        out["final"] = True
    if w.failed:
        out["failed"] = True
    if w.workers:
        out["workers"] = w.workers
    out["at"] = key_text(w.at)
    out["events"] = w.events
    if w.first_at is not None:
        out["firstAt"] = key_text(w.first_at)
        out["firstFraction"] = w.first_fraction
    return out


def _roster_json(r: Roster, pack: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"reporting": len(r.marks), "final": r.finals}
    if r.failures:
        out["failed"] = r.failures
    # The reporting pods final by their pod's end (no final of their own): what a reader of
    # the status alone (a list row) adds to ``final`` and ``failed``, without the marks.
    if r.pod_finals:
        out["podFinal"] = r.pod_finals
    if r.pod_failures:
        out["podFailed"] = r.pod_failures
    if r.declared:
        out["declared"] = r.declared
    if r.first_failure is not None:
        f = r.first_failure
        out["firstFailure"] = {"pod": f.pod, "at": key_text(f.at), "message": f.message}
    if r.last_final is not None:
        out["lastFinal"] = key_text(r.last_final)
    if pack:  # (the per-pod fields below, together: the status budget)
        out["packed"] = pack_roster(r.marks, r.lives, r.ends, r.other_ends)
        if r.replaced:
            out["replaced"] = r.replaced
        return out
    out["marks"] = encode_marks(r.marks)
    if r.lives:
        out["livesFrom"], out["lives"] = encode_lives(r.marks, r.lives)
        if r.replaced:
            out["replaced"] = r.replaced
    if r.ends:
        out["outcomes"] = encode_ends(r.ends)
        uids = encode_end_uids(r.ends)
        if uids:
            out["outcomeUids"] = uids
    if r.other_ends:
        out["otherOutcomes"] = encode_other_ends(r.other_ends)
    return out


def _observed_json(o: Observed, st: dict[str, Any]) -> None:
    """``podOutcomes``, ``waitingPods`` and ``platform``: what the objects said, in ``st``."""
    if o.pods:
        st["podOutcomes"] = [_verdict_json(v, "at") for _, v in sorted(o.pods.items())]
    if o.waiting:
        st["waitingPods"] = [_verdict_json(v, "since") for _, v in sorted(o.waiting.items())]
        if o.waiting_more:
            st["waitingCount"] = len(o.waiting) + o.waiting_more
    if o.running:
        st["runningPods"] = o.running
        if o.running_since is not None:
            st["runningSince"] = format_seconds(o.running_since)
    p = o.platform
    if p is not None:
        out: dict[str, Any] = {"apiVersion": p.api_version, "kind": p.kind, "name": p.name,
                               "uid": p.uid, "phase": p.phase}
        if p.reason:
            out["reason"] = p.reason
        if p.message:
            out["message"] = p.message
        if p.at is not None:
            out["at"] = format_seconds(p.at)
        st["platform"] = out


def _verdict_json(v: PodVerdict, time_key: str) -> dict[str, Any]:
    out: dict[str, Any] = {"pod": v.pod, "uid": v.uid}
    if v.terminal:
        out["phase"] = v.phase
    out["reason"] = v.reason
    if v.message:
        out["message"] = v.message
    if v.exit_code is not None:
        out["exitCode"] = v.exit_code
    out[time_key] = format_seconds(v.at)
    if not v.explained:
        out["explained"] = False
    return out


def _progress_json(agg: TaskProgress, phase: str) -> dict[str, Any]:
    pct = percent(agg.fraction, phase)
    # percentText is what the Progress printer column shows ("35%"; kubectl cannot format).
    out: dict[str, Any] = {"percent": pct, "percentText": f"{pct}%", "message": agg.message}
    if agg.eta is not None:
        out["estimatedCompletionTime"] = format_seconds(agg.eta)
    return out
