"""The server's one list+watch of TaskFeedbacks, shared by every open tab: tidings.kube's
ListWatch runs in a thread with the user's own credentials, and the event loop keeps what it
saw (the objects, a sequence number per change) and wakes the tabs that wait for news.

A tab is a ``Subscriber``: the keys that changed since it last looked (a set, so a busy task
written ten times while a tab is slow costs it one update, not ten), and whether the banner
(errors, notices) changed. A tab that reconnects says the last sequence number it saw and
gets what changed since; one too far behind is told to reload.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from tidings.cli.kube import Action, Kube, api_error, translate_error, watch_message
from tidings.kube import KubeError, Listing, ListWatch, Page, WatchLines
from tidings.kube.flowcontrol import Backoff
from tidings.kube.objects import KubeObject
from tidings.schemas.wire.contract import TASKFEEDBACK_RESOURCE, taskfeedback_path

Key = tuple[str, str]  # (namespace, name)

# A tab waits this long between failed lists at most: the page says why meanwhile.
BACKOFF_BASE, BACKOFF_CAP = 0.4, 30.0
# Deleted keys remembered for tabs that reconnect (beyond it, such a tab reloads).
TOMBSTONES = 10_000
WATCH_TIMEOUT = 300


def key_of(obj: KubeObject) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Subscriber:
    """One open tab: the list (``key`` None) or the page of one task."""

    def __init__(self, key: Key | None) -> None:
        self.key = key
        self.dirty: set[Key] = set()
        self.banner = True  # the banner is sent first
        self.reload = False
        self.wake = asyncio.Event()

    def touch(self, key: Key) -> None:
        if self.key is None or self.key == key:
            self.dirty.add(key)
            self.wake.set()

    def take(self) -> list[Key]:
        keys, self.dirty = sorted(self.dirty), set()
        return keys

    async def wait(self) -> None:
        await self.wake.wait()
        self.wake.clear()


class Hub:
    """The TaskFeedbacks of ``namespace`` (None: every namespace) with labels ``selector``,
    as the user's credentials may list them. When every namespace is refused and no
    namespace was asked for, the hub narrows to ``fallback`` (the context's namespace), as a
    person would with -n, and says so."""

    def __init__(self, kube: Kube, namespace: str | None, selector: str | None = None,
                 fallback: str | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.selector = selector or None
        self.fallback = fallback
        self.objects: dict[Key, KubeObject] = {}
        self.changed: dict[Key, int] = {}  # key -> sequence number of its last change
        self.seq = 0
        self.floor = 0  # changes at or below it may be forgotten (tombstones pruned)
        self.synced = False  # listed at least once
        self.error = ""  # the CLI's words for the last failure; "" once a list works
        self.notice = ""
        self.subscribers: set[Subscriber] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._loop_watch: ListWatch | None = None
        self._thread: threading.Thread | None = None

    # -- the event loop's side ------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._thread = threading.Thread(target=self._run, name="tidings-ui-hub", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        lw = self._loop_watch
        if lw is not None:
            lw.stop()

    def covers(self, namespace: str) -> bool:
        return self.namespace is None or self.namespace == namespace

    def subscribe(self, key: Key | None, since: int | None) -> Subscriber:
        """A tab from now on; with ``since`` (the last sequence number it saw), what changed
        after it is due at once (None: everything there is)."""
        sub = Subscriber(key)
        if since is not None and since < self.floor:
            sub.reload = True
        for k, s in self.changed.items():
            if since is None or s > since:
                sub.touch(k)
        if key is not None:
            sub.touch(key)  # a task's page always starts from the task as it is
        sub.wake.set()
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def _bump(self, key: Key) -> None:
        self.seq += 1
        self.changed[key] = self.seq
        for sub in self.subscribers:
            sub.touch(key)

    def _banner(self) -> None:
        for sub in self.subscribers:
            sub.banner = True
            sub.wake.set()

    def _replace(self, items: list[KubeObject]) -> None:
        fresh = {key_of(o): o for o in items}
        for key in self.objects.keys() - fresh.keys():
            self._bump(key)
        for key, obj in fresh.items():
            old = self.objects.get(key)
            if old is None or _rv(old) != _rv(obj):
                self._bump(key)
        self.objects = fresh
        self._prune()
        if not self.synced or self.error:
            self.synced, self.error = True, ""
            self._banner()

    def _apply(self, batch: list[tuple[str, KubeObject]]) -> None:
        for kind, obj in batch:
            key = key_of(obj)
            if kind == "DELETED":
                if self.objects.pop(key, None) is not None:
                    self._bump(key)
            else:
                self.objects[key] = obj
                self._bump(key)
        self._prune()

    def _prune(self) -> None:
        gone = len(self.changed) - len(self.objects)
        if gone <= TOMBSTONES:
            return
        dead = sorted((s, k) for k, s in self.changed.items() if k not in self.objects)
        for s, k in dead[:gone - TOMBSTONES]:
            del self.changed[k]
            self.floor = max(self.floor, s)

    def _failed(self, message: str, notice: str = "") -> None:
        if message != self.error or notice != self.notice:
            self.error, self.notice = message, notice or self.notice
            self._banner()

    # -- the watch thread -----------------------------------------------------------------

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not self._stop.is_set():
            loop.call_soon_threadsafe(fn, *args)

    def _run(self) -> None:
        namespace = self.namespace
        while not self._stop.is_set() and self._watch(namespace):
            namespace = self.fallback
            self._post(self._narrowed, namespace)

    def _narrowed(self, namespace: str) -> None:
        self.namespace = namespace
        self._banner()

    def _watch(self, namespace: str | None) -> bool:
        """List and watch until stopped; True when the hub narrowed to its fallback
        namespace (the caller watches again)."""
        action = Action("list", TASKFEEDBACK_RESOURCE, namespace or "")
        narrow = threading.Event()

        def failed(err: Exception) -> None:
            if isinstance(err, KubeError) and err.status:
                message = api_error(err.status, err.body, action, err.message).message
            else:
                mapped = translate_error(err, self.kube.server)
                message = mapped.message if mapped is not None else \
                    f"internal error: {type(err).__name__}: {err}"
            if (isinstance(err, KubeError) and err.forbidden and namespace is None
                    and self.fallback):
                narrow.set()
                lw.stop()
                self._post(self._failed, "", f"{message}: showing namespace {self.fallback} "
                           "(the context's; -n chooses another)")
                return
            self._post(self._failed, message)

        connect_s = self.kube.timeout if isinstance(self.kube.timeout, float) \
            else self.kube.timeout[0]
        lw = ListWatch(self.kube.client, taskfeedback_path(namespace),
                       {"labelSelector": self.selector}, watch_timeout=WATCH_TIMEOUT,
                       timeout=(connect_s, WATCH_TIMEOUT + 30), list_timeout=self.kube.timeout,
                       backoff=Backoff(base=BACKOFF_BASE, cap=BACKOFF_CAP), on_error=failed)
        self._loop_watch = lw
        if self._stop.is_set():
            return False
        items: list[KubeObject] = []
        for change in lw:
            if isinstance(change, Listing):
                items = []
            elif isinstance(change, Page):
                items += change.items
                if change.last:
                    self._post(self._replace, items)
                    items = []
            elif isinstance(change, WatchLines):
                batch: list[tuple[str, KubeObject]] = []
                for line in change.lines:
                    kind, obj = watch_message(line) or ("", None)
                    if kind == "ERROR":
                        lw.relist("error")
                        break
                    if obj is None:
                        continue
                    lw.advance(_rv(obj))
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        batch.append((kind, obj))
                if batch:
                    self._post(self._apply, batch)
        return narrow.is_set()
