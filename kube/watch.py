"""The one list+watch loop of tidings.kube (client-go's reflector without its store): list,
watch from the list's resourceVersion with bookmarks, resume where the stream left off, relist
when the server no longer has that version, back off (capped) after every failure.

The loop never decodes a watch line: it yields each socket read's raw lines and the caller
decodes them (the watcher hands them to its fast parser in batches), then tells the loop the
resourceVersion it reached (``advance``) or that the stream can no longer be trusted
(``relist``). Everything else (when to list, what to watch from, how long to wait) is decided
here, once, for the watcher's reflector and every CLI follow.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from .client import (
    METADATA_LIST,
    METADATA_ONLY,
    Client,
    Query,
    Timeout,
    iter_line_batches,
    paginate,
)
from .errors import KubeError
from .flowcontrol import Backoff
from .objects import KubeObject


@dataclass(frozen=True, slots=True)
class Listing:
    """The loop is about to list (again): ``cause`` says why (``start``, ``gone``, ``error``,
    ``short_watch``, or whatever the caller gave ``relist``)."""

    cause: str


@dataclass(frozen=True, slots=True)
class Page:
    """One page of the list; ``last`` carries the list's resourceVersion (the watch's start)."""

    items: list[KubeObject]
    resource_version: str
    last: bool


@dataclass(frozen=True, slots=True)
class WatchLines:
    """The non-empty watch lines one socket read completed, raw (the caller decodes them)."""

    lines: list[bytes]


@dataclass(frozen=True, slots=True)
class Rewatch:
    """The watch ended at its timeout; the next one resumes from ``resource_version``."""


Change = Listing | Page | WatchLines | Rewatch


def _ignore(err: Exception) -> None:
    """The default error callback: every failure is retried after the backoff."""


class ListWatch:
    """Iterate for the changes of the collection at ``path`` (``query``: its selectors).

    ``resource_version``: None lists first; a version (``""``: the newest) watches from it at
    once (a caller that has just read the collection itself). With ``lists=False`` the loop
    never lists: on ``Listing`` the caller reads what it needs and calls ``listed`` with the
    version to watch from.

    Failures: a 410 (or an ``Expired`` answer) relists; any other failure goes to
    ``on_error`` (which may raise to end the loop) and is retried after ``backoff``, from the
    same version when there is one. A watch that ends at once without a line is a stale
    version (events have no watch cache: the server may answer 200 and close): relist.
    ``stop`` (from any thread) ends the iteration, unblocking a read in progress.
    """

    def __init__(self, client: Client, path: str, query: Query = None, *,
                 resource_version: str | None = None, lists: bool = True,
                 watch_timeout: int = 60, timeout: Timeout = None, list_timeout: Timeout = None,
                 page_size: int = 500, short_watch: float = 1.0, backoff: Backoff | None = None,
                 on_error: Callable[[Exception], None] = _ignore,
                 metadata_only: bool = False) -> None:
        self.client, self.path = client, path
        # Only the objects' metadata, listed and watched (the rest neither encoded nor read).
        self.metadata_only = metadata_only
        pairs = query.items() if isinstance(query, Mapping) else query or []
        self.query = [(k, v) for k, v in pairs if v is not None]
        self.resource_version = resource_version
        self.lists = lists
        self.watch_timeout = watch_timeout
        # The read timeout outlives the server-side timeout, so a half-open connection ends.
        self.timeout = timeout if timeout is not None else (5, 2 * watch_timeout + 5)
        self.list_timeout = list_timeout if list_timeout is not None \
            else (5, max(30, watch_timeout))
        self.page_size, self.short_watch = page_size, short_watch
        self.backoff = backoff or Backoff()
        self.on_error = on_error
        self._relist = ""  # why the caller wants the current watch to end in a relist
        self._stop = threading.Event()
        self._resp: Any = None

    # --- the caller's side --------------------------------------------------------------
    def advance(self, resource_version: str) -> None:
        """The caller has read the stream up to this version (a bookmark's too)."""
        if resource_version:
            self.resource_version = resource_version

    def relist(self, cause: str) -> None:
        """The stream cannot be trusted from here (an ERROR line, a line that would not
        decode): end this watch and list again."""
        self._relist = cause

    def listed(self, resource_version: str) -> None:
        """With ``lists=False``: the caller has read the collection as of this version."""
        self.resource_version = resource_version

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()  # unblock a read in progress (urllib3 >= 2.3)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # --- the loop -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Change]:
        cause = "start"
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._relist = ""
                    yield Listing(cause)
                    if self._stop.is_set():
                        return
                    if self.lists:
                        yield from self._list()
                    elif self.resource_version is None:
                        self.resource_version = ""  # the caller read nothing: the newest
                yield from self._watch()
                if self._stop.is_set():
                    return
                if not self._relist:
                    self.backoff.reset()
                    yield Rewatch()
                    continue  # resume from the last version at once
                cause, self.resource_version = self._relist, None
            except KubeError as err:
                if self._stop.is_set():
                    return
                if err.expired:
                    cause, self.resource_version = "gone", None
                else:
                    self.on_error(err)
                    if self.resource_version is None:
                        cause = "error"
            except Exception as err:  # never let the loop die on a surprise
                if self._stop.is_set():
                    return
                self.on_error(err)
                cause, self.resource_version = "error", None
            self._stop.wait(self.backoff.next())

    def _list(self) -> Iterator[Page]:
        rv = ""
        def get(q: list[tuple[str, Any]]) -> Any:
            if not self.metadata_only:
                return self.client.get(self.path, q, timeout=self.list_timeout)
            return self.client.request("GET", self.path, query=q, timeout=self.list_timeout,
                                       accept=METADATA_LIST)

        for page in paginate(get, self.query, self.page_size):
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "")
            items = page.get("items")
            yield Page(cast("list[KubeObject]", items) if isinstance(items, list) else [], rv,
                       not meta.get("continue"))
        self.resource_version = rv

    def _watch(self) -> Iterator[WatchLines]:
        query = [*self.query, ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("resourceVersion", self.resource_version or ""),
                 ("timeoutSeconds", str(self.watch_timeout))]
        started = time.monotonic()
        lines = 0
        resp = self._resp = self.client.stream(self.path, query, timeout=self.timeout) \
            if not self.metadata_only else self.client.stream(self.path, query,
                                                              timeout=self.timeout,
                                                              accept=METADATA_ONLY)
        try:
            if self._stop.is_set():
                return
            for batch in iter_line_batches(resp, skip_empty=True):
                lines += len(batch)
                yield WatchLines(batch)
                if self._relist or self._stop.is_set():
                    return
        finally:
            self._resp = None
            with contextlib.suppress(Exception):
                resp.release_conn()
            with contextlib.suppress(Exception):
                resp.close()
        if lines == 0 and time.monotonic() - started < self.short_watch:
            self._relist = "short_watch"
