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
                 lastFinal?, marks, outcomes?,  # every pod: what the completion rule reads
                 lives?, outcomeUids?, otherOutcomes? | packed}  # packed: all per-pod fields
                                                    # at once past 512 (the status budget)
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

from typing import TYPE_CHECKING

from tidings._lazy import lazy_exports

if TYPE_CHECKING:
    from .engine.completion import TaskProgress
    from .engine.folding import fold, fold_all, fold_checked, fold_many
    from .engine.lineage import LineageEntry, fold_lineage
    from .engine.state import (
        CLOCK_SKEW,
        COUNTER_NAMES,
        DEFAULT_LIMITS,
        Limits,
        Named,
        SpanAgg,
        TaskState,
        new_state,
    )
    from .engine.version_vector import VersionVector
    from .engine.workers import ProgressState
    from .wire.constants import (
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
    from .wire.event import (
        ParsedEvent,
        WatchItem,
        build_event,
        event_name,
        parse_event,
        parse_watch_line,
    )
    from .wire.note import decode_note, encode_note, encode_note_bytes, valid_instance, valid_seq
    from .wire.payloads import (
        DeckReady,
        LogLink,
        Metric,
        Metrics,
        Payload,
        PodSpawned,
        Progress,
        Quiet,
        SpanSummaries,
        SpanSummary,
        UnknownPayload,
        Window,
        payload_type,
        span_summaries,
    )
    from .wire.refs import ObjectRef, PodRef, TaskRef
    from .wire.rejection import Rejection, RejectReason
    from .wire.text import sanitize_text
    from .wire.times import format_time, parse_time

# Each name loads its own module on first use (PEP 562): `tidings.emitter` imports the
# references alone (the payloads and the Event contract load on its sender thread), never
# the fold and the state it does not run.
_LAZY = {
    "API_GROUP": "wire.constants",
    "API_VERSION": "wire.constants",
    "BUS_CONTROLLER": "wire.constants",
    "EVENTS_API_VERSION": "wire.constants",
    "INSTANCE_ANNOTATION": "wire.constants",
    "KIND": "wire.constants",
    "NAME_LIMIT": "wire.constants",
    "NOTE_LIMIT": "wire.constants",
    "PLURAL": "wire.constants",
    "SCHEMA_VERSION": "wire.constants",
    "SEQ_ANNOTATION": "wire.constants",
    "TASK_LABEL": "wire.constants",
    "URL_LIMIT": "wire.constants",
    "ObjectRef": "wire.refs",
    "ParsedEvent": "wire.event",
    "PodRef": "wire.refs",
    "TaskRef": "wire.refs",
    "WatchItem": "wire.event",
    "build_event": "wire.event",
    "event_name": "wire.event",
    "parse_event": "wire.event",
    "parse_watch_line": "wire.event",
    "fold": "engine.folding",
    "fold_all": "engine.folding",
    "fold_checked": "engine.folding",
    "fold_many": "engine.folding",
    "LineageEntry": "engine.lineage",
    "fold_lineage": "engine.lineage",
    "decode_note": "wire.note",
    "encode_note": "wire.note",
    "encode_note_bytes": "wire.note",
    "valid_instance": "wire.note",
    "valid_seq": "wire.note",
    "DeckReady": "wire.payloads",
    "LogLink": "wire.payloads",
    "Metric": "wire.payloads",
    "Metrics": "wire.payloads",
    "Payload": "wire.payloads",
    "PodSpawned": "wire.payloads",
    "Quiet": "wire.payloads",
    "Progress": "wire.payloads",
    "SpanSummaries": "wire.payloads",
    "SpanSummary": "wire.payloads",
    "UnknownPayload": "wire.payloads",
    "Window": "wire.payloads",
    "payload_type": "wire.payloads",
    "span_summaries": "wire.payloads",
    "Rejection": "wire.rejection",
    "RejectReason": "wire.rejection",
    "CLOCK_SKEW": "engine.state",
    "COUNTER_NAMES": "engine.state",
    "DEFAULT_LIMITS": "engine.state",
    "Limits": "engine.state",
    "Named": "engine.state",
    "ProgressState": "engine.workers",
    "SpanAgg": "engine.state",
    "TaskProgress": "engine.completion",
    "TaskState": "engine.state",
    "new_state": "engine.state",
    "sanitize_text": "wire.text",
    "format_time": "wire.times",
    "parse_time": "wire.times",
    "VersionVector": "engine.version_vector",
}



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
    "Quiet",
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

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY, __all__)


def new_instance_id() -> str:
    """A fresh emitter instance id (32 hex chars) for one emitter process lifetime."""
    import uuid

    return uuid.uuid4().hex
