"""Sender check: an event's related Pod must carry ``tidings.dev/task=<task>``.

Pods are cached by a label-filtered informer (a reflector source); a cache miss falls back to
a direct GET, since a new pod may race its first event. Deleted pods stay known for a while
(bounded), so late or relisted events of a finished pod still verify.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from enum import Enum
from typing import Any

import orjson

from tidings.schemas.constants import TASK_LABEL
from tidings.schemas.event import ParsedEvent, WatchItem
from tidings.schemas.rejection import Rejection, RejectReason

from .kube import Kube, KubeError

log = logging.getLogger("tidings.watcher.senders")

PodKey = tuple[str, str, str]  # namespace, name, uid


class Retry(Enum):
    """The sender could not be verified right now (API unreachable): try the event later."""

    LATER = "later"


def _pod(obj: Any) -> tuple[PodKey, str | None] | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    labels = meta.get("labels") or {}
    task = labels.get(TASK_LABEL) if isinstance(labels, dict) else None
    return (str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))), \
        (task if isinstance(task, str) else None)


class Senders:
    """Pod cache (reflector source for ``/pods?labelSelector=tidings.dev/task``) + the check."""

    resource = "pods"

    def __init__(self, kube: Kube | None, *, max_deleted: int = 20000,
                 negative_ttl: float = 5.0) -> None:
        self.kube = kube
        self._lock = threading.Lock()
        self._live: dict[PodKey, str | None] = {}
        self._deleted: OrderedDict[PodKey, str | None] = OrderedDict()
        self._negative: dict[PodKey, float] = {}
        self._listed: set[PodKey] = set()
        self.max_deleted, self.negative_ttl = max_deleted, negative_ttl

    # --- informer source ----------------------------------------------------------------
    def list_begin(self) -> None:
        self._listed = set()

    def list_page(self, items: list[Any]) -> None:
        for obj in items:
            p = _pod(obj)
            if p is not None:
                self._listed.add(p[0])
                self.put(*p)

    def list_done(self, resource_version: str) -> None:
        with self._lock:
            gone = [k for k in self._live if k not in self._listed]
        for k in gone:
            self.delete(k)
        self._listed = set()

    def watch_line(self, line: bytes) -> WatchItem:
        try:
            msg = orjson.loads(line)
            wtype, obj = msg["type"], msg["object"]
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        except Exception:
            return WatchItem("", "", None)
        if wtype == "ERROR":
            code = obj.get("code")
            return WatchItem(wtype, rv, None, code if isinstance(code, int) else None)
        p = _pod(obj)
        if p is not None and wtype in ("ADDED", "MODIFIED"):
            self.put(*p)
        elif p is not None and wtype == "DELETED":
            self.delete(p[0])
        return WatchItem(wtype, rv, None)

    # --- cache --------------------------------------------------------------------------
    def put(self, key: PodKey, task: str | None) -> None:
        with self._lock:
            self._live[key] = task
            self._deleted.pop(key, None)
            self._negative.pop(key, None)

    def delete(self, key: PodKey) -> None:
        with self._lock:
            task = self._live.pop(key, None)
            self._deleted[key] = task
            self._deleted.move_to_end(key)
            while len(self._deleted) > self.max_deleted:
                self._deleted.popitem(last=False)

    def lookup(self, key: PodKey) -> tuple[bool, str | None]:
        """(known, task label) from the cache alone."""
        with self._lock:
            if key in self._live:
                return True, self._live[key]
            if key in self._deleted:
                return True, self._deleted[key]
            until = self._negative.get(key)
            if until is not None and until > time.monotonic():
                return True, None
            return False, None

    # --- the check ----------------------------------------------------------------------
    def check(self, ev: ParsedEvent) -> Rejection | Retry | None:
        """None when the sender is a pod of the event's task; a Rejection when it is not."""
        s = ev.sender
        key = (s.namespace or ev.task.namespace, s.name, s.uid)
        known, task = self.lookup(key)
        if not known:
            fetched = self._fetch(key)
            if fetched is Retry.LATER:
                return Retry.LATER
            known, task = True, fetched
        if task == ev.task.name:
            return None
        why = "not labelled for this task" if task is not None else "unknown or unlabelled pod"
        return Rejection.of(RejectReason.SPOOFED_SENDER,
                            f"related pod {s.name} is {why} ({ev.task.name})")

    def _fetch(self, key: PodKey) -> str | Retry | None:
        ns, name, _uid = key
        if self.kube is None:
            return None
        try:
            obj = self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}",
                                    timeout=(3, 10))
        except KubeError as e:
            if e.status == 404:
                obj = None
            elif e.status in (401, 403):
                log.warning("cannot read pod %s/%s: %s", ns, name, e)
                obj = None
            else:
                return Retry.LATER
        p = _pod(obj) if obj is not None else None
        if p is not None and p[0] == key:
            self.put(*p)
            return p[1]
        with self._lock:
            self._negative[key] = time.monotonic() + self.negative_ttl
            if len(self._negative) > 10000:
                now = time.monotonic()
                self._negative = {k: v for k, v in self._negative.items() if v > now}
        return None
