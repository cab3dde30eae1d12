"""The watcher's reflector: the events (or pods) of one collection, from tidings.kube's one
list+watch loop, parsed from raw lines by the source and handed on; relisted whenever the
stream can't be trusted.

The loop only reads, parses (through the source's parser) and hands items on; it never does
slow work inline, so a slow task downstream can never stall the stream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from tidings.kube import (
    Client,
    KubeError,
    Listing,
    ListWatch,
    Page,
    Rewatch,
    WatchLines,
    is_expired,
)
from tidings.kube.flowcontrol import Backoff
from tidings.kube.objects import KubeObject
from tidings.schemas.wire.event import WatchItem

log = logging.getLogger("tidings.watcher.reflector")


def object_line(line: bytes) -> tuple[str, Any, WatchItem]:
    """One watch line of objects (pods, Jobs, ...) decoded: (its type, its object, the
    WatchItem to give the reflector). An ERROR or unreadable line has no object (None)."""
    try:
        msg = orjson.loads(line)
        wtype, obj = msg["type"], msg["object"]
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    except Exception:
        return "", None, WatchItem("", "", None)
    if wtype == "ERROR":
        code = obj.get("code")
        return wtype, None, WatchItem(wtype, rv, None, code if isinstance(code, int) else None)
    return wtype, obj, WatchItem(wtype, rv, None)


class Source(Protocol):
    """What a reflector reads and where it delivers (events for the fold, pods for senders)."""

    resource: str  # for logs and metrics: "events" or "pods"

    def list_begin(self) -> None: ...
    def list_page(self, items: list[KubeObject]) -> None: ...
    def list_done(self, resource_version: str) -> None: ...
    def watch_line(self, line: bytes) -> WatchItem:
        """Parse one raw watch line and deliver it (cheaply: enqueue, cache update)."""
        ...

    # Optional: ``watch_lines(lines) -> list[WatchItem]`` takes the lines of one socket read
    # at once (parsed and delivered in order, stopping after a line that ends the watch).


class Reflector:
    """One list+watch loop over ``path`` (a collection URL) with extra query ``selector``."""

    def __init__(self, client: Client, path: str, selector: list[tuple[str, str]],
                 source: Source, *, on_relist: Callable[[str], None] = lambda cause: None,
                 on_restart: Callable[[], None] = lambda: None,
                 watch_timeout: int = 60, page_size: int = 500, short_watch: float = 1.0,
                 backoff: Backoff | None = None,
                 quiet: Callable[[Exception], bool] | None = None,
                 metadata_only: bool = False) -> None:
        self.source = source
        self.on_relist, self.on_restart = on_relist, on_restart
        # Failures the source says itself (True: not logged here); retried all the same, and
        # the relists they cause are not logged either.
        self.quiet = quiet
        self._quieted = False
        self.synced = threading.Event()  # the first list has been delivered
        self.loop = ListWatch(client, path, selector, watch_timeout=watch_timeout,
                              page_size=page_size, short_watch=short_watch, backoff=backoff,
                              on_error=self._failed,
                              metadata_only=metadata_only)

    @property
    def resource_version(self) -> str | None:
        return self.loop.resource_version

    # --- lifecycle ----------------------------------------------------------------------
    def stop(self) -> None:
        self.loop.stop()

    def run(self) -> None:
        source, loop = self.source, self.loop
        # One batch per socket read when the source takes batches (one wake-up downstream).
        batched: Callable[[list[bytes]], list[WatchItem]] | None = \
            getattr(source, "watch_lines", None)
        for change in loop:
            if isinstance(change, WatchLines):
                try:
                    items = batched(change.lines) if batched is not None \
                        else [source.watch_line(line) for line in change.lines]
                    self._read(items)
                except Exception as e:  # never let the loop die on a surprise
                    log.exception("%s: unexpected error: %s", source.resource, e)
                    loop.relist("error")
            elif isinstance(change, Page):
                source.list_page(change.items)
                if change.last:
                    source.list_done(change.resource_version)
                    self.synced.set()
                    self._quieted = False
            elif isinstance(change, Listing):
                if change.cause != "start" and not self._quieted:
                    log.info("%s: relist (%s)", source.resource, change.cause)
                self.on_relist(change.cause)
                source.list_begin()
            elif isinstance(change, Rewatch):
                self.on_restart()

    def _read(self, items: list[WatchItem]) -> None:
        for item in items:
            if item.type == "ERROR":
                self.loop.relist("gone" if is_expired(item.code or 0) else "error")
                return
            if item.type == "":
                self.loop.relist("decode_error")  # a line we cannot read may hide an event
                return
            self.loop.advance(item.resource_version)

    def _failed(self, err: Exception) -> None:
        if self.quiet is not None and self.quiet(err):
            self._quieted = True
            return
        if isinstance(err, KubeError):
            log.warning("%s: %s", self.source.resource, err)
        else:
            log.exception("%s: unexpected error: %s", self.source.resource, err)
