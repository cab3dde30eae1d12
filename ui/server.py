"""`tidings ui`'s web server (Starlette on uvicorn, server-sent events by sse-starlette): the
list of tasks, a page per task, and their live updates, read with the user's own credentials
(the `kubectl proxy` model: nothing is granted that the user does not have).

Read-only: every route is a GET. Every page carries a Content-Security-Policy that allows
only this server's own script and style (no inline script, no other origin); every request
must name this server in its Host header and come from its own pages (ui/guard.py: no DNS
rebinding, no cross-site request). Bounded: at most MAX_STREAMS open event streams (a 503
past it) and ui/logs.py's MAX_SESSIONS log sessions, opened only for a task that exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tidings.cli.common import CliError
from tidings.cli.kube import Action, Kube
from tidings.schemas.wire.contract import TASKFEEDBACK_RESOURCE, taskfeedback_path
from tidings.schemas.wire.names import valid_namespace, valid_object_name
from tidings.ui import pages
from tidings.ui.guard import ASGIApp, Guard, allowed_hosts, is_loopback
from tidings.ui.hub import Hub, Key
from tidings.ui.logs import MAX_SESSIONS, Sessions

STATIC = Path(__file__).resolve().parent / "static"
PING_S = 15.0
# A tab that has not taken an update for this long is gone (a sleeping laptop): drop it.
SEND_TIMEOUT_S = 30.0
# Open event streams (one per tab) per server; past it a stream is refused with a 503.
MAX_STREAMS = 64
# How long the answer to "may the user list this namespace's tasks?" is kept, and for how
# many namespaces.
MAY_LIST_TTL_S, MAY_LIST_KEPT = 60.0, 256

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
]

class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response (pages, events, assets, errors)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


@dataclass
class Settings:
    """What the page is told about the server itself."""

    address: str
    scope: str
    version: str
    allowed_hosts: tuple[str, ...] = ()  # --allowed-host: more names a request may use


class Ui:
    """The routes over one hub (the shared list+watch) and the tasks' log sessions."""

    def __init__(self, kube: Kube, hub: Hub, settings: Settings) -> None:
        self.kube, self.hub, self.settings = kube, hub, settings
        self.sessions = Sessions(kube)
        self.cache = pages.Cache()
        # Update numbers are this process's: a tab that saw another's starts afresh.
        self.epoch = secrets.token_hex(4)
        self.streams = 0  # open event streams (MAX_STREAMS)
        self._may_list: dict[str, tuple[bool, float]] = {}

    # -- helpers --------------------------------------------------------------------------

    def _since(self, request: Request) -> int | None:
        """The last update a tab saw (its Last-Event-ID, or the number its page was rendered
        at): ``<epoch>-<seq>``, this server's numbers only (None: another's, or none)."""
        raw = request.headers.get("last-event-id") or request.query_params.get("since") or ""
        epoch, _, seq = raw.partition("-")
        ok = epoch == self.epoch and seq.isascii() and seq.isdigit() and len(seq) < 19
        return int(seq) if ok else None

    def _page(self, template: str, page: str, events: str, status: int = 200,
              **values: Any) -> HTMLResponse:
        s = self.settings
        html = pages.render(template, page=page, events=events, version=s.version,
                            scope=self.scope(), exposed=not is_loopback(s.address),
                            address=s.address, banner=self.banner(), **values)
        return HTMLResponse(html, status_code=status, headers={"cache-control": "no-store"})

    def scope(self) -> str:
        hub = self.hub
        where = "all namespaces" if hub.namespace is None else f"namespace {hub.namespace}"
        return f"{where}{f', -l {hub.selector}' if hub.selector else ''} · {self.settings.scope}"

    def banner(self) -> Markup:
        hub = self.hub
        return Markup(pages.render("banner.html", error=hub.error, notice=hub.notice,
                                         synced=hub.synced))

    async def _missing(self, key: Key) -> str:
        """What the page says for a task the hub does not have, in the CLI's words. A
        namespace is suggested only when the user may list its tasks."""
        hub = self.hub
        ns, name = key
        if not hub.covers(ns):
            where = f"namespace {ns} is outside this server's scope (namespace {hub.namespace})"
            if await self.may_list(ns):
                return pages.message(f"{where}: restart tidings ui with -n {ns} to see it")
            return pages.message(where)
        if hub.error:
            return pages.message(hub.error)
        if not hub.synced:
            return pages.message("listing tasks…", "loading")
        return pages.message(f"not found: task {name!r} in namespace {ns} (no TaskFeedback"
                             f"{' with labels ' + hub.selector if hub.selector else ''})")

    async def may_list(self, namespace: str) -> bool:
        """Whether the user may list the TaskFeedbacks of ``namespace`` (what ``-n`` needs),
        as the API server answers a list of one; kept MAY_LIST_TTL_S."""
        now = time.monotonic()
        known = self._may_list.get(namespace)
        if known is not None and now - known[1] < MAY_LIST_TTL_S:
            return known[0]

        def ask() -> bool:
            try:
                self.kube.get_json(taskfeedback_path(namespace), {"limit": 1}, action=Action(
                    "list", TASKFEEDBACK_RESOURCE, namespace))
                return True
            except CliError:
                return False

        allowed = await asyncio.to_thread(ask)
        cache = self._may_list
        cache.pop(namespace, None)
        while len(cache) >= MAY_LIST_KEPT:
            del cache[next(iter(cache))]
        cache[namespace] = (allowed, now)
        return allowed

    def _events(self, stream: Callable[[], AsyncIterator[ServerSentEvent]]) -> Response:
        """An event stream, or a 503 past MAX_STREAMS: the slot is taken here and given
        back when the response ends, however it ends."""
        if self.streams >= MAX_STREAMS:
            return PlainTextResponse(
                f"too many open event streams on this server ({MAX_STREAMS}): close some of "
                "its tabs\n", 503, headers={"retry-after": "30", "cache-control": "no-store"})
        self.streams += 1
        return _Events(stream(), self)

    # -- routes ---------------------------------------------------------------------------

    async def list_page(self, request: Request) -> Response:
        hub = self.hub
        rows = Markup("\n".join(self.cache.row(o) for _, o in sorted(hub.objects.items())))
        return self._page("list.html", "list", f"/events?since={self.epoch}-{hub.seq}",
                          rows=rows)

    async def list_events(self, request: Request) -> Response:
        hub = self.hub
        since = self._since(request)
        asked = _asked(request)

        async def stream() -> AsyncIterator[ServerSentEvent]:
            sub = hub.subscribe(None, since)
            if since is None and asked:  # another server's numbers: start afresh
                sub.reload = True
            try:
                while True:
                    if sub.reload:
                        yield ServerSentEvent(event="reload", data="")
                        return
                    if sub.banner:
                        sub.banner = False
                        yield ServerSentEvent(event="banner", data=str(self.banner()))
                    keys = sub.take()
                    seq = f"{self.epoch}-{hub.seq}"
                    for key in keys:
                        obj = hub.objects.get(key)
                        if obj is None:
                            self.cache.forget(key)
                            yield ServerSentEvent(event="gone", data=pages.row_id(key), id=seq)
                        else:
                            yield ServerSentEvent(event="row", data=self.cache.row(obj), id=seq)
                    await sub.wait()
            finally:
                hub.unsubscribe(sub)

        return self._events(stream)

    def _task_key(self, request: Request) -> Key:
        ns, name = request.path_params["namespace"], request.path_params["name"]
        if not (valid_namespace(ns) and valid_object_name(name)):
            raise HTTPException(404, "not found: no such task page (invalid name)")
        return ns, name

    async def task_page(self, request: Request) -> Response:
        key = self._task_key(request)
        obj = self.hub.objects.get(key)
        body = self.cache.body(obj) if obj is not None else await self._missing(key)
        session = self.sessions.open_sessions.get(key)
        lineage = pages.lineage(*key, session.fates if session else None,
                                session.lineage_error if session else "")
        ns, name = key
        return self._page("task.html", "task", pages.task_url(ns, name) + "/events",
                          namespace=ns, name=name, body=Markup(body),
                          lineage=Markup(lineage))

    async def task_events(self, request: Request) -> Response:
        key = self._task_key(request)
        hub = self.hub
        log_seen = self._since(request) or 0

        async def stream() -> AsyncIterator[ServerSentEvent]:
            nonlocal log_seen
            lineage_seen = -1
            sub = hub.subscribe(key, None)
            # The lineage and logs are followed once the task exists: a page of a task that
            # does not exist (or not yet) costs the cluster nothing but the shared watch.
            session = None
            told_full = False
            try:
                while True:
                    if sub.banner:
                        sub.banner = False
                        yield ServerSentEvent(event="banner", data=str(self.banner()))
                    if sub.take():
                        obj = hub.objects.get(key)
                        body = self.cache.body(obj) if obj is not None \
                            else await self._missing(key)
                        yield ServerSentEvent(event="task", data=body)
                    if session is None and key in hub.objects:
                        session = self.sessions.open(key)
                        if session is not None:
                            session.subscribers.add(sub)
                        elif not told_full:
                            told_full = True
                            yield ServerSentEvent(event="note", data=(
                                f"logs not followed: this server follows {MAX_SESSIONS} "
                                "tasks' logs already; close another task's page and reload"))
                    if session is not None:
                        if session.lineage_seq != lineage_seen and session.fates is not None:
                            lineage_seen = session.lineage_seq
                            yield ServerSentEvent(event="lineage", data=pages.lineage(
                                *key, session.fates, session.lineage_error))
                        for line in session.lines_after(log_seen):
                            log_seen = line.seq
                            yield ServerSentEvent(event="note" if line.note else "log",
                                                  data=line.text,
                                                  id=f"{self.epoch}-{line.seq}")
                    await sub.wait()
            finally:
                hub.unsubscribe(sub)
                if session is not None:
                    session.subscribers.discard(sub)
                    self.sessions.close(session)

        return self._events(stream)

    async def timeline(self, request: Request) -> Response:
        key = self._task_key(request)
        obj = self.hub.objects.get(key)
        if obj is None:
            raise HTTPException(404, "not found")
        svg = await asyncio.to_thread(pages.timeline_svg, obj)
        return Response(svg, media_type="image/svg+xml",
                        headers={"cache-control": "private, max-age=3600"})

    async def not_found(self, request: Request, exc: Exception) -> Response:
        detail = exc.detail if isinstance(exc, HTTPException) else "not found"
        code = exc.status_code if isinstance(exc, HTTPException) else 404
        if code == 405:
            return Response("method not allowed: this server is read-only\n", 405,
                            media_type="text/plain", headers={"allow": "GET, HEAD"})
        return self._page("error.html", "error", f"/events?since={self.epoch}-0", status=code,
                          text=detail if detail != "Not Found" else
                          f"not found: {request.url.path} (no such page)")

    # -- the application ------------------------------------------------------------------

    def app(self) -> Starlette:
        hosts = allowed_hosts(self.settings.address, self.settings.allowed_hosts)

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.hub.start(asyncio.get_running_loop())
            try:
                yield
            finally:
                self.hub.stop()
                self.sessions.stop_all()

        return Starlette(
            routes=[
                Route("/", self.list_page, methods=["GET"]),
                Route("/events", self.list_events, methods=["GET"]),
                Route("/tasks/{namespace}/{name}", self.task_page, methods=["GET"]),
                Route("/tasks/{namespace}/{name}/events", self.task_events, methods=["GET"]),
                Route("/tasks/{namespace}/{name}/timeline.svg", self.timeline,
                      methods=["GET"]),
                Mount("/static", StaticFiles(directory=STATIC), name="static"),
            ],
            middleware=[Middleware(SecurityHeaders), Middleware(Guard, allowed=hosts)],
            exception_handlers={HTTPException: self.not_found},
            lifespan=lifespan,
        )


def _asked(request: Request) -> bool:
    return bool(request.headers.get("last-event-id") or request.query_params.get("since"))


class _Events(EventSourceResponse):
    """An event stream that gives its slot back to the server when it ends."""

    def __init__(self, stream: AsyncIterator[ServerSentEvent], ui: Ui) -> None:
        super().__init__(stream, ping=PING_S, send_timeout=SEND_TIMEOUT_S,
                         headers={"cache-control": "no-store"})
        self.ui = ui

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.ui.streams -= 1


def listen(address: str, port: int) -> socket.socket:
    """A listening socket on ``address``:``port`` (0: any free port). OSError when it
    cannot be had."""
    family = socket.AF_INET6 if ":" in address.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve(app: Starlette, sock: socket.socket) -> None:
    """Run until interrupted (Ctrl-C, SIGTERM); open event streams are closed then."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])
