"""The Event contract: build an events.k8s.io/v1 Event for a payload, and parse one back.

``parse_event`` and ``parse_watch_line`` are total: any input yields a value, never an exception.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson

from ._fast import slot_constructor
from .constants import (
    ACTION,
    API_VERSION,
    BUS_CONTROLLER,
    EVENTS_API_VERSION,
    INSTANCE_ANNOTATION,
    KIND,
    REPORTING_INSTANCE_LIMIT,
    SENDER_UID_ANNOTATION,
    SEQ_ANNOTATION,
)
from .names import valid_object_name, valid_task_id
from .note import decode_envelope, encode_note, valid_instance, valid_seq
from .payloads import Payload, PodSpawned, payload_type
from .refs import ObjectRef as ObjectRef  # (refs.py: no dependency; importable from here too)
from .refs import PodRef as PodRef
from .refs import TaskRef as TaskRef
from .refs import valid_uid as valid_uid
from .rejection import Rejection, RejectReason
from .text import sanitize_text
from .times import format_time, parse_time

_DIGEST_HEX = 16
_NAME_MAX = 253
_NON_DNS = re.compile(r"[^a-z0-9.\-]+")


@lru_cache(maxsize=4096)  # few distinct task names; this sits on the watcher's hot path
def _dns_prefix(name: str) -> str:
    labels = [lab.strip("-") for lab in _NON_DNS.sub("-", name.lower()).split(".")]
    s = ".".join(lab for lab in labels if lab)
    s = s[: _NAME_MAX - _DIGEST_HEX - 1].rstrip("-.")
    return s or "task"


def event_name(task_name: str, instance: str, seq: int) -> str:
    """Deterministic Event name ``<task>.<sha256(instance, seq)[:16]>``, a DNS subdomain.

    The task part is lowercased, made DNS-safe and truncated so the whole stays <= 253 chars.
    """
    return f"{_dns_prefix(task_name)}.{_name_digest(instance, seq)}"


def _name_digest(instance: str, seq: int) -> str:
    """The part of ``event_name`` after the task's prefix and its dot."""
    return hashlib.sha256(f"{instance}\x00{seq}".encode()).hexdigest()[:_DIGEST_HEX]


def _truncate_bytes(s: str, limit: int) -> str:
    b = s.encode()
    return s if len(b) <= limit else b[:limit].decode("utf-8", "ignore")


def build_event(
    *,
    task: TaskRef,
    pod: PodRef,
    payload: Payload,
    instance: str,
    seq: int,
    time: datetime,
    warning: bool = False,
    regarding: ObjectRef | None = None,
    task_uid: str = "",
    sender_proof: bool = True,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event dict, ready to POST to ``.../namespaces/{task.namespace}/events``.

    ``regarding`` defaults to the task's TaskFeedback; lineage passes the app/owner instead,
    and an emitter that knows no task id its own Pod (the watcher finds the task by the
    pod's labels; ``task.name`` is then unused).
    ``task_uid`` is that TaskFeedback's uid when it was created before the task ran
    (``TIDINGS_TASK_UID``): with it the event shows in ``kubectl describe``. A malformed uid
    is left out, since the bus itself does not need it.
    ``sender_proof`` stamps the pod's uid into the ``tidings.dev/sender-uid`` annotation: the
    admission policy admits it only from that pod's own bound token, so it proves the sender
    even after the pod is gone. Callers without a pod-bound token (people, tests acting for
    a pod) must pass False, or the policy refuses the event.
    Raises ValueError only for an invalid ``instance`` or ``seq``.
    """
    if not valid_instance(instance) or not valid_seq(seq):
        raise ValueError("invalid emitter instance id or seq")
    ns = task.namespace
    if regarding is None:
        subject: dict[str, str] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "namespace": ns,
            "name": task.name,
        }
        if task_uid and valid_uid(task_uid):
            subject["uid"] = task_uid
        subject_name = task.name
    else:
        subject = {
            "apiVersion": regarding.api_version,
            "kind": regarding.kind,
            "namespace": regarding.namespace or ns,
            "name": regarding.name,
        }
        if regarding.uid:
            subject["uid"] = regarding.uid
        subject_name = regarding.name
    return {
        "apiVersion": EVENTS_API_VERSION,
        "kind": "Event",
        "metadata": {
            "name": event_name(subject_name, instance, seq),
            "namespace": ns,
            "annotations": {INSTANCE_ANNOTATION: instance, SEQ_ANNOTATION: str(seq),
                            **({SENDER_UID_ANNOTATION: pod.uid} if sender_proof else {})},
        },
        "eventTime": format_time(time),
        "reportingController": BUS_CONTROLLER,
        "reportingInstance": _truncate_bytes(pod.name, REPORTING_INSTANCE_LIMIT),
        "action": ACTION,
        "reason": payload_type(payload),
        "type": "Warning" if warning else "Normal",
        "regarding": subject,
        "related": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace or ns,
            "name": pod.name,
            "uid": pod.uid,
        },
        "note": encode_note(payload, instance=instance, seq=seq),
    }


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    """A validated bus event. ``task`` is the regarding subject's namespace/name."""

    task: TaskRef
    sender: PodRef
    payload: Payload
    instance: str
    seq: int
    event_time: datetime  # aware, UTC
    name: str
    regarding_kind: str
    warning: bool = False
    regarding_api_version: str = API_VERSION
    regarding_uid: str = ""
    resource_version: str = ""
    # The tidings.dev/sender-uid annotation when it equals the related pod's uid, else "":
    # where the admission policy is installed, the API server authenticated that pod.
    sender_proof: str = ""
    # The API server's metadata.creationTimestamp (its own clock; bounds eventTime), or None.
    created: datetime | None = None

    @property
    def order_key(self) -> tuple[datetime, str, int]:
        """Total order for last-writer-wins: (eventTime, instance, seq)."""
        return (self.event_time, self.instance, self.seq)

    @property
    def reason(self) -> str:
        """The payload type (the Event reason)."""
        return payload_type(self.payload)


def _is_map(v: object) -> bool:
    # The exact-type test is the fast path; the ABC check only runs for exotic mappings.
    return type(v) is dict or isinstance(v, Mapping)


def _reject(reason: RejectReason, msg: str) -> Rejection:
    return Rejection(reason, msg)


_new_parsed_event = slot_constructor(ParsedEvent)


# Few distinct tasks and pods send many events each, so each subject and sender is checked
# once and its ref interned: identical objects also make the fold's same-task check an
# identity test.
@lru_cache(maxsize=4096)
def _subject(namespace: str, name: str) -> TaskRef | None:
    """The interned TaskRef of a regarding subject, or None when its name is not valid.

    Callers pass names of at most 253 characters, so the cache's size stays bounded."""
    if len(name) > 253 or sanitize_text(name) != name:
        return None
    return TaskRef(namespace, name)


@lru_cache(maxsize=4096)
def _task_id(name: str) -> bool:
    """``valid_task_id``, cached: callers pass names of at most 253 characters."""
    return valid_task_id(name)


@lru_cache(maxsize=4096)
def _sender(name: str, uid: str, namespace: str) -> PodRef | None:
    """The interned PodRef of a related pod, or None when its name or uid is not valid.

    Callers pass only short strings (no longer than the patterns can match), so the cache's
    size stays bounded."""
    if not valid_object_name(name) or not valid_uid(uid):
        return None
    return PodRef(name, uid, namespace)


def _parse(obj: Any) -> ParsedEvent | Rejection:
    # Checks run in the order of the contract; the common case is every check passing, so
    # the exact dict type is tested inline and the ABC test is reached only on exotic input.
    if type(obj) is not dict and not isinstance(obj, Mapping):
        return _reject(RejectReason.NOT_A_BUS_EVENT, "event is not an object")
    get = obj.get
    api = get("apiVersion")
    if api is not None and api != EVENTS_API_VERSION:
        return _reject(RejectReason.NOT_A_BUS_EVENT, "not an events.k8s.io/v1 Event")
    kind = get("kind")
    if kind is not None and kind != "Event":
        return _reject(RejectReason.NOT_A_BUS_EVENT, "not an Event")
    if get("reportingController") != BUS_CONTROLLER:
        return _reject(RejectReason.NOT_A_BUS_EVENT, "reportingController is not the bus")
    if get("action") != ACTION:
        return _reject(RejectReason.NOT_A_BUS_EVENT, "action is not Report")

    meta: Any = get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        return _reject(RejectReason.MISSING_FIELD, "metadata missing")
    name = meta.get("name")
    ns = meta.get("namespace")
    if type(name) is not str or type(ns) is not str or not name or not ns:
        return _reject(RejectReason.MISSING_FIELD, "metadata.name or metadata.namespace missing")
    rv = meta.get("resourceVersion")
    created = parse_time(meta.get("creationTimestamp"))

    raw_time = get("eventTime")
    if raw_time is None:
        return _reject(RejectReason.MISSING_FIELD, "eventTime missing")
    event_time = parse_time(raw_time)
    if event_time is None:
        return _reject(RejectReason.BAD_TIME, "eventTime is not an RFC 3339 time")

    etype = get("type")
    if etype == "Normal":
        warning = False
    elif etype == "Warning":
        warning = True
    else:
        return _reject(RejectReason.INVALID_PAYLOAD, "type is neither Normal nor Warning")

    note = get("note")
    if note is None:
        return _reject(RejectReason.MISSING_FIELD, "note missing")
    decoded = decode_envelope(note)
    if isinstance(decoded, Rejection):
        return decoded
    payload, instance, seq = decoded
    if get("reason") != payload_type(payload):
        return _reject(RejectReason.INVALID_PAYLOAD, "reason does not match the note's type")

    # The note is the authoritative home of the dedup key; annotations are the fallback.
    if instance is None or seq is None:
        ann: Any = meta.get("annotations")
        if _is_map(ann):
            if instance is None:
                a = ann.get(INSTANCE_ANNOTATION)
                instance = a if valid_instance(a) else None
            if seq is None:
                s = ann.get(SEQ_ANNOTATION)
                if isinstance(s, str) and s.isascii() and s.isdigit() and len(s) <= 19:
                    seq = int(s) if valid_seq(int(s)) else None
        if instance is None or seq is None:
            return _reject(RejectReason.MISSING_FIELD, "emitter instance or seq missing")

    reg: Any = get("regarding")
    if type(reg) is not dict and not isinstance(reg, Mapping):
        return _reject(RejectReason.BAD_REGARDING, "regarding missing")
    reg_kind = reg.get("kind")
    reg_api = reg.get("apiVersion")
    reg_name = reg.get("name")
    if type(reg_name) is not str or type(reg_kind) is not str or not reg_name or not reg_kind:
        return _reject(RejectReason.BAD_REGARDING, "regarding lacks kind or name")
    if reg.get("namespace", ns) not in (ns, ""):
        return _reject(RejectReason.BAD_REGARDING, "regarding is in another namespace")
    # A fact is about a TaskFeedback, or (an emitter that knows no task id) about its own
    # pod, checked against related below; lineage may be about any object.
    about_pod = reg_kind == "Pod" and reg_api == "v1"
    if (reg_kind != KIND or reg_api != API_VERSION) and not about_pod \
            and type(payload) is not PodSpawned:
        return _reject(RejectReason.BAD_REGARDING, "regarding is not a TaskFeedback")
    # Length first: only short strings ever reach (and stay in) the caches.
    task = _subject(ns, reg_name) if len(reg_name) <= 253 else None
    if task is None:
        return _reject(RejectReason.BAD_REGARDING, "regarding name is not a valid name")
    if reg_kind == KIND and not _task_id(reg_name):
        return _reject(RejectReason.BAD_TASK_ID, "regarding name is not a valid task id")

    rel: Any = get("related")
    if type(rel) is not dict and not isinstance(rel, Mapping):
        return _reject(RejectReason.BAD_RELATED, "related pod missing")
    if rel.get("kind") != "Pod" or rel.get("apiVersion", "v1") != "v1":
        return _reject(RejectReason.BAD_RELATED, "related is not a v1 Pod")
    pod_name = rel.get("name")
    pod_uid = rel.get("uid")
    rel_ns = rel.get("namespace") or ns
    # A workload reports about its own task, so its pod shares the task's namespace; a
    # controller recording lineage usually runs elsewhere (its own namespace).
    if rel_ns != ns and type(payload) is not PodSpawned:
        return _reject(RejectReason.BAD_RELATED, "related pod is in another namespace")
    sender = (
        _sender(pod_name, pod_uid, rel_ns)
        if type(rel_ns) is str
        and len(rel_ns) <= 253
        and type(pod_name) is str
        and type(pod_uid) is str
        # The patterns' own limits, checked first so only short strings reach the caches.
        and len(pod_name) <= 253
        and len(pod_uid) <= 64
        else None
    )
    if sender is None:
        return _reject(RejectReason.BAD_RELATED, "related pod lacks a valid name or uid")
    reg_uid = reg.get("uid")
    if about_pod and type(payload) is not PodSpawned and (
            reg_name != sender.name or reg_uid != sender.uid or rel_ns != ns):
        return _reject(RejectReason.BAD_REGARDING, "regarding is a pod other than the sender")

    # The name binds the dedup key to one object: the API server refuses a second object of
    # the same name, so one (instance, seq) can never carry two different payloads per task.
    if name != event_name(reg_name, instance, seq):
        return _reject(RejectReason.BAD_NAME, "metadata.name does not match task/instance/seq")

    proof = ""
    ann = meta.get("annotations")
    if _is_map(ann) and ann.get(SENDER_UID_ANNOTATION) == sender.uid:
        proof = sender.uid
    return _new_parsed_event(
        task,
        sender,
        payload,
        instance,
        seq,
        event_time,
        name,
        reg_kind,
        warning,
        reg_api if type(reg_api) is str else "",
        reg_uid if type(reg_uid) is str else "",
        rv if type(rv) is str else "",
        proof,
        created,
    )


def parse_event(obj: Mapping[str, Any]) -> ParsedEvent | Rejection:
    """Validate an Event as the API server returns it (camelCase JSON). Never raises."""
    try:
        return _parse(obj)
    except Exception as e:  # totality: a surprise in hostile input is a rejection, not a crash
        return Rejection.of(RejectReason.INVALID_PAYLOAD, f"unparseable event: {type(e).__name__}")


@dataclass(frozen=True, slots=True)
class WatchItem:
    """One watch-stream line: its type, resourceVersion and parse result.

    ``result`` is None for BOOKMARK and ERROR; ERROR carries the Status ``code`` (410 = Gone)
    and its sanitised ``message``. A line that is not a watch event has type "" and a Rejection.
    """

    type: str
    resource_version: str
    result: ParsedEvent | Rejection | None
    code: int | None = None
    message: str = ""


_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED"})
_new_watch_item = slot_constructor(WatchItem)


def _watch(line: bytes | str) -> WatchItem:
    try:
        msg = orjson.loads(line)
    except Exception:
        return WatchItem("", "", Rejection(RejectReason.MALFORMED_JSON, "watch line is not JSON"))
    if type(msg) is not dict:
        return WatchItem("", "", Rejection(RejectReason.BAD_WATCH_LINE, "not a watch event"))
    wtype = msg.get("type")
    obj = msg.get("object")
    if not isinstance(wtype, str) or type(obj) is not dict:
        return WatchItem("", "", Rejection(RejectReason.BAD_WATCH_LINE, "not a watch event"))
    meta = obj.get("metadata")
    rv = ""
    if type(meta) is dict:
        r = meta.get("resourceVersion")
        if isinstance(r, str) and len(r) <= 64:
            rv = r
    if wtype in _EVENT_TYPES:
        return _new_watch_item(wtype, rv, _parse(obj), None, "")
    if wtype == "BOOKMARK":
        return WatchItem(wtype, rv, None)
    if wtype == "ERROR":
        code = obj.get("code")
        message = obj.get("message")
        return WatchItem(
            wtype,
            rv,
            None,
            code if type(code) is int else None,
            sanitize_text(message)[:500] if isinstance(message, str) else "",
        )
    return WatchItem("", rv, Rejection(RejectReason.BAD_WATCH_LINE, "unknown watch event type"))


def parse_watch_line(line: bytes | str) -> WatchItem:
    """Parse one raw watch-stream line (``{"type":...,"object":...}``). Never raises."""
    try:
        return _watch(line)
    except Exception as e:  # totality on the hot path: hostile bytes never stop the watch loop
        return WatchItem(
            "", "", Rejection.of(RejectReason.INVALID_PAYLOAD, f"unparseable: {type(e).__name__}")
        )
