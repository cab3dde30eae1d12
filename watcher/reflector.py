"""List, then watch, one API collection from raw lines; relist whenever the stream can't be trusted.

The loop only reads, parses (through the source's parser) and hands items on; it never does
slow work inline, so a slow task downstream can never stall the stream.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from tidings.kube import paginate
from tidings.kube.flowcontrol import Backoff
from tidings.schemas.event import WatchItem

from .kube import Kube, KubeError

log = logging.getLogger("tidings.watcher.reflector")


class Source(Protocol):
    """What a reflector reads and where it delivers (events for the fold, pods for senders)."""

    resource: str  # for logs and metrics: "events" or "pods"

    def list_begin(self) -> None: ...
    def list_page(self, items: list[Any]) -> None: ...
    def list_done(self, resource_version: str) -> None: ...
    def watch_line(self, line: bytes) -> WatchItem:
        """Parse one raw watch line and deliver it (cheaply: enqueue, cache update)."""
        ...

    # Optional: ``watch_lines(lines) -> list[WatchItem]`` takes the lines of one socket read
    # at once (parsed and delivered in order, stopping after a line that ends the watch).


class Relist(Exception):
    """The stream can no longer be trusted from the current resourceVersion."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class Reflector:
    """One list+watch loop over ``path`` (a collection URL) with extra query ``selector``."""

    def __init__(self, kube: Kube, path: str, selector: list[tuple[str, str]], source: Source,
                 *, on_relist: Callable[[str], None] = lambda cause: None,
                 on_restart: Callable[[], None] = lambda: None,
                 watch_timeout: int = 60, page_size: int = 500, short_watch: float = 1.0,
                 backoff: Backoff | None = None) -> None:
        self.kube, self.path, self.selector, self.source = kube, path, selector, source
        self.on_relist, self.on_restart = on_relist, on_restart
        self.watch_timeout, self.page_size, self.short_watch = watch_timeout, page_size, short_watch
        self.backoff = backoff or Backoff()
        self.resource_version: str | None = None
        self.synced = threading.Event()  # the first list has been delivered
        self._stop = threading.Event()
        self._resp: Any = None

    # --- lifecycle ----------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()  # unblock a read in progress (urllib3 >= 2.3)

    def run(self) -> None:
        cause = "start"
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.on_relist(cause)
                    self._list()
                    self.synced.set()
                self._watch()
                continue  # a normal end (timeoutSeconds): resume from the last RV at once
            except Relist as r:
                cause = r.cause
                self.resource_version = None
                log.info("%s: relist (%s)", self.source.resource, cause)
            except KubeError as e:
                if self._stop.is_set():
                    return
                if e.status == 410:
                    cause, self.resource_version = "gone", None
                    log.info("%s: 410 Gone, relist", self.source.resource)
                else:
                    log.warning("%s: %s", self.source.resource, e)
                    if self.resource_version is None:
                        cause = "error"
            except Exception as e:  # never let the loop die on a surprise
                log.exception("%s: unexpected error: %s", self.source.resource, e)
                cause, self.resource_version = "error", None
            self._stop.wait(self.backoff.next())

    # --- list -------------------------------------------------------------------------
    def _list(self) -> None:
        self.source.list_begin()
        rv = ""
        for page in paginate(lambda q: self.kube.request(
                "GET", self.path, query=q, timeout=(5, max(30, self.watch_timeout))),
                self.selector, self.page_size):
            self.source.list_page(page.get("items") or [])
            rv = str((page.get("metadata") or {}).get("resourceVersion") or "")
        self.source.list_done(rv)
        self.resource_version = rv

    # --- watch ------------------------------------------------------------------------
    def _watch(self) -> None:
        query = [*self.selector, ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("resourceVersion", self.resource_version or ""),
                 ("timeoutSeconds", str(self.watch_timeout))]
        started = time.monotonic()
        lines = 0
        # The read timeout outlives the server-side timeout, so a half-open connection ends.
        # One batch per socket read when the source takes batches (one wake-up downstream).
        batched = callable(getattr(self.source, "watch_lines", None))
        stream = self.kube.stream(self.path, query=query,
                                  timeout=(5, 2 * self.watch_timeout + 5), on_open=self._opened,
                                  **({"batches": True} if batched else {}))
        try:
            for got in stream:
                if batched:
                    lines += len(got)
                    items = self.source.watch_lines(got)  # type: ignore[attr-defined]
                else:
                    lines += 1
                    items = [self.source.watch_line(got)]
                for item in items:
                    if item.type == "ERROR":
                        if item.code == 410:
                            raise Relist("gone")
                        raise Relist("error")
                    if item.type == "":
                        raise Relist("decode_error")  # a line we cannot read may hide an event
                    if item.resource_version:
                        self.resource_version = item.resource_version
                if self._stop.is_set():
                    return
        finally:
            self._resp = None
            stream.close()
        if lines == 0 and time.monotonic() - started < self.short_watch:
            # Events have no watch cache: a stale RV may answer 200 and close at once.
            raise Relist("short_watch")
        self.backoff.reset()
        self.on_restart()

    def _opened(self, resp: Any) -> None:
        self._resp = resp
