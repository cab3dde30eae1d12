"""tidings.schemas: the pure core shared by emitter, watcher and CLI (no I/O, no kubernetes).

Payload models, the note codec, the Event contract, and the fold of events into task state.

Status layout (``TaskState.to_status()``; snake_case keys, all JSON-safe)::

    schema_version: 1
    task:       {namespace, name}
    completed:  bool                      # terminal progress seen
    progress:   {fraction, message, final, at} | null
    links:      {name: {url, at, events}}   # LWW per name by ``at``
    decks:      {name: {uri, at, events}}
    spans:      {name: {count, total_s, total_ns, min_s, max_s, first_start, last_end,
                        errors, events}}   # total_ns is authoritative, total_s derived
    pods:       [{name, uid, events}]       # sender pods, sorted by (name, uid)
    applied:    {instance: [[lo, hi], ...]} # the version vector
    last_event_time: RFC 3339 | null
    warnings:   int                         # applied events of type Warning
    unknown:    {type: events}
    summary:    {progress?, links, deck?, completed}  # derived; the CRD printer columns
    counters:   {events_applied, duplicates, links_capped, decks_capped, spans_capped,
                 pods_capped, unknown_payloads, unknown_capped, pods_spawned, wrong_task,
                 fold_errors}

``at`` is the order key ``[eventTime, instance, seq]``. ``events`` counts the events that
targeted an entry.
"""

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
    ObjectRef,
    ParsedEvent,
    PodRef,
    TaskRef,
    WatchItem,
    build_event,
    event_name,
    format_time,
    parse_event,
    parse_time,
    parse_watch_line,
)
from .lineage import LineageEntry, fold_lineage
from .note import decode_note, encode_note, encode_note_bytes, valid_instance, valid_seq
from .payloads import (
    DeckReady,
    LogLink,
    Payload,
    PodSpawned,
    Progress,
    SpanSummary,
    UnknownPayload,
    payload_type,
)
from .rejection import Rejection, RejectReason
from .state import (
    COUNTER_NAMES,
    DEFAULT_LIMITS,
    Limits,
    Named,
    ProgressState,
    SpanAgg,
    TaskState,
    fold,
    fold_all,
    fold_many,
    new_state,
)
from .text import sanitize_text
from .version_vector import VersionVector

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "BUS_CONTROLLER",
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
    "SpanSummary",
    "TaskRef",
    "TaskState",
    "UnknownPayload",
    "VersionVector",
    "WatchItem",
    "build_event",
    "decode_note",
    "encode_note",
    "encode_note_bytes",
    "event_name",
    "fold",
    "fold_all",
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
    "valid_instance",
    "valid_seq",
]


def new_instance_id() -> str:
    """A fresh emitter instance id (32 hex chars) for one emitter process lifetime."""
    import uuid

    return uuid.uuid4().hex
