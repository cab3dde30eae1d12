"""tidings.schemas: the pure core shared by emitter, watcher and CLI (no I/O, no kubernetes).

Payload models, the note codec, the Event contract, and the fold of events into task state.

Status layout (``status_encoder.to_status(state)``; camelCase, structural; deploy/crd.yaml
documents every field, and empty maps, zero counters and absent values are left out)::

    schemaVersion: 2
    phase:      Pending | Running | Succeeded | Failed      # the completion rule (completion.py)
    conditions: [Completed, Failed, PodsReady?,            # metav1.Condition
                 Stalled, NonFiniteMetrics, Straggling]    # health, when judged (health.py)
    health:     {summary, evaluatedAt?, stalled?, straggling?, nonFinite?, counts?}
    progress:   {percent, percentText, message, estimatedCompletionTime?}  # the aggregate
    linkCount:  int;  deck: latest deck name               # printer columns
    links:      {name: {url, at, events}}                  # LWW per name by ``at``
    decks:      {name: {uri, at, events}}
    metrics:    {name: {value, step?, at, events,            # LWW per name by ``at``
                        min, max, history?: {shift, steps, values}}}  # joins (history.py)
    metricsBeyond: {name: "<at> <events>[ NaN|Infinity|-Infinity]"}  # beyond the cap
    spans:      {name: {count, totalNs, minS, maxS, firstStart, lastEnd, errors, events,
                        windows,                   # windows: "<shift> lo-hi,..." (timelines)
                        pod? | pods?: {pod: {count, ..., windows}}, unlaned?}}  # lanes
    workers:    [{pod, fraction, message?, final?, failed?, workers?, at, events,
                  firstAt?, firstFraction?}]          # the 64 smallest pod names, in detail
    roster:     {reporting, final, failed?, declared?, firstFailure?: {pod, at, message},
                 lastFinal?, marks, outcomes?}  # every pod: what the completion rule reads
    paces:      ["<pod> <reports> <firstMs> <first 1e-4> <latest - first ms> <latest 1e-4>
                  [<received - latest ms>],..."]  # every running pod's pace, 64 a string
    podOutcomes: [{pod, uid, phase, reason, message?, exitCode?, at, explained?}]
                                    # how pods ended, as their objects say (observed.py)
    waitingPods: [{pod, uid, reason, message?, exitCode?, since}]   # why pods wait, now
    waitingCount?: int              # how many wait, when more than waitingPods names
    platform:   {apiVersion, kind, name, uid, phase, reason?, message?, at?}  # its owner
    pods:       [{name, uid, events}]                      # sender pods, sorted
    unknownTypes: {type: events}
    counters:   {eventsApplied, duplicates, warnings, ...}  # non-zero ones only
    firstEventTime, lastEventTime: RFC 3339
    applied:    "inst=lo-hi,seq@created inst2=..."         # the version vector, one string
    compactedBefore: RFC 3339                              # dedup compaction watermark
    budgetDropped: {pods?, podOutcomes?, unknownTypes?, workerMessages?, spanLanes?,
                    metricHistory?, paces?, metrics?, spans?, decks?, links?}

``at`` is the order key ``"<eventTime> <instance> <seq>"``. ``events`` counts the events that
targeted an entry.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .completion import TaskProgress
    from .constants import (
        API_GROUP,
        API_VERSION,
        BUS_CONTROLLER,
        EVENTS_API_VERSION,
        INSTANCE_ANNOTATION,
        KIND,
        NAME_LIMIT,
        NOTE_LIMIT,
        PLURAL,
        SCHEMA_VERSION,
        SEQ_ANNOTATION,
        TASK_LABEL,
        URL_LIMIT,
    )
    from .event import (
        ParsedEvent,
        WatchItem,
        build_event,
        event_name,
        parse_event,
        parse_watch_line,
    )
    from .folding import fold, fold_all, fold_checked, fold_many
    from .lineage import LineageEntry, fold_lineage
    from .note import decode_note, encode_note, encode_note_bytes, valid_instance, valid_seq
    from .payloads import (
        DeckReady,
        LogLink,
        Metric,
        Metrics,
        Payload,
        PodSpawned,
        Progress,
        SpanSummaries,
        SpanSummary,
        UnknownPayload,
        Window,
        payload_type,
        span_summaries,
    )
    from .refs import ObjectRef, PodRef, TaskRef
    from .rejection import Rejection, RejectReason
    from .state import (
        CLOCK_SKEW,
        COUNTER_NAMES,
        DEFAULT_LIMITS,
        Limits,
        Named,
        SpanAgg,
        TaskState,
        new_state,
    )
    from .text import sanitize_text
    from .times import format_time, parse_time
    from .version_vector import VersionVector
    from .workers import ProgressState

# Each name loads its own module on first use (PEP 562): `tidings.emitter` imports the
# references alone (the payloads and the Event contract load on its sender thread), never
# the fold and the state it does not run.
_LAZY = {
    "API_GROUP": "constants",
    "API_VERSION": "constants",
    "BUS_CONTROLLER": "constants",
    "EVENTS_API_VERSION": "constants",
    "INSTANCE_ANNOTATION": "constants",
    "KIND": "constants",
    "NAME_LIMIT": "constants",
    "NOTE_LIMIT": "constants",
    "PLURAL": "constants",
    "SCHEMA_VERSION": "constants",
    "SEQ_ANNOTATION": "constants",
    "TASK_LABEL": "constants",
    "URL_LIMIT": "constants",
    "ObjectRef": "refs",
    "ParsedEvent": "event",
    "PodRef": "refs",
    "TaskRef": "refs",
    "WatchItem": "event",
    "build_event": "event",
    "event_name": "event",
    "parse_event": "event",
    "parse_watch_line": "event",
    "fold": "folding",
    "fold_all": "folding",
    "fold_checked": "folding",
    "fold_many": "folding",
    "LineageEntry": "lineage",
    "fold_lineage": "lineage",
    "decode_note": "note",
    "encode_note": "note",
    "encode_note_bytes": "note",
    "valid_instance": "note",
    "valid_seq": "note",
    "DeckReady": "payloads",
    "LogLink": "payloads",
    "Metric": "payloads",
    "Metrics": "payloads",
    "Payload": "payloads",
    "PodSpawned": "payloads",
    "Progress": "payloads",
    "SpanSummaries": "payloads",
    "SpanSummary": "payloads",
    "UnknownPayload": "payloads",
    "Window": "payloads",
    "payload_type": "payloads",
    "span_summaries": "payloads",
    "Rejection": "rejection",
    "RejectReason": "rejection",
    "CLOCK_SKEW": "state",
    "COUNTER_NAMES": "state",
    "DEFAULT_LIMITS": "state",
    "Limits": "state",
    "Named": "state",
    "ProgressState": "workers",
    "SpanAgg": "state",
    "TaskProgress": "completion",
    "TaskState": "state",
    "new_state": "state",
    "sanitize_text": "text",
    "format_time": "times",
    "parse_time": "times",
    "VersionVector": "version_vector",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tidings.schemas' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # dir(), help() and editors' completion see the names __getattr__ loads, without loading.
    return sorted({*globals(), *__all__})


__all__ = [
    "API_GROUP",
    "API_VERSION",
    "BUS_CONTROLLER",
    "CLOCK_SKEW",
    "COUNTER_NAMES",
    "DEFAULT_LIMITS",
    "EVENTS_API_VERSION",
    "INSTANCE_ANNOTATION",
    "KIND",
    "NAME_LIMIT",
    "NOTE_LIMIT",
    "PLURAL",
    "SCHEMA_VERSION",
    "SEQ_ANNOTATION",
    "TASK_LABEL",
    "URL_LIMIT",
    "DeckReady",
    "Limits",
    "LineageEntry",
    "LogLink",
    "Metric",
    "Metrics",
    "Named",
    "ObjectRef",
    "ParsedEvent",
    "Payload",
    "PodRef",
    "PodSpawned",
    "Progress",
    "ProgressState",
    "RejectReason",
    "Rejection",
    "SpanAgg",
    "SpanSummaries",
    "SpanSummary",
    "TaskProgress",
    "TaskRef",
    "TaskState",
    "UnknownPayload",
    "VersionVector",
    "WatchItem",
    "Window",
    "build_event",
    "decode_note",
    "encode_note",
    "encode_note_bytes",
    "event_name",
    "fold",
    "fold_all",
    "fold_checked",
    "fold_lineage",
    "fold_many",
    "format_time",
    "new_instance_id",
    "new_state",
    "parse_event",
    "parse_time",
    "parse_watch_line",
    "payload_type",
    "sanitize_text",
    "span_summaries",
    "valid_instance",
    "valid_seq",
]


def new_instance_id() -> str:
    """A fresh emitter instance id (32 hex chars) for one emitter process lifetime."""
    import uuid

    return uuid.uuid4().hex
