"""`tidings ui`'s request policy as pure code: the Host a request names
(DNS rebinding, with the address served on loopback or not) and the site it comes from
(cross-site requests), on every route; the page's log lines and sessions bounded."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import MutableMapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.ui.guard import Guard, address_reached, allowed_hosts, host_of, refusal
from tidings.ui.logs import (
    LINE_LIMIT,
    LOG_CHARS,
    LOG_LINES,
    MAX_SESSIONS,
    Sessions,
    TaskSession,
    _PagePrinter,
    shown_line,
)

ROUTES = ["/", "/events", "/tasks/ml/train", "/tasks/ml/train/events",
          "/tasks/ml/train/timeline.svg", "/static/app.js", "/nowhere"]
PAGES = {"/", "/tasks/ml/train"}
LOCAL = allowed_hosts("127.0.0.1")


def names() -> set[str]:
    return {"gpu-box", "gpu-box.lab.example", "192.0.2.10"}


def asks(path: str = "/", host: str = "127.0.0.1:8765", **headers: str) -> tuple[int, str] | None:
    return refusal("GET", path, {"host": host, **{k.replace("_", "-"): v
                                                  for k, v in headers.items()}}, LOCAL)


def test_the_hosts_a_request_may_name() -> None:
    assert {"localhost", "127.0.0.1", "::1"} == LOCAL
    # Another loopback address: itself too, and no more of this host's names.
    assert allowed_hosts("127.0.0.2", host_names=names) == LOCAL | {"127.0.0.2"}
    # Off loopback the Host check stays (it was switched off: allowed_hosts=["*"]): the
    # address served, this host's names and the flag's, nothing else.
    exposed = allowed_hosts("192.0.2.10", ["ui.lab.example", "[2001:db8::1]:8765"],
                            host_names=names)
    assert exposed == LOCAL | names() | {"ui.lab.example", "2001:db8::1"}
    assert "*" not in exposed
    everywhere = allowed_hosts("0.0.0.0", host_names=names)
    assert everywhere == LOCAL | names() and "0.0.0.0" not in everywhere
    assert allowed_hosts("::", host_names=names) == LOCAL | names()


def test_host_headers_parse_strictly() -> None:
    assert host_of("127.0.0.1:8765") == "127.0.0.1"
    assert host_of("[::1]:8765") == "::1" and host_of("[0:0::1]") == "::1"
    assert host_of("LocalHost.:80") == "localhost"
    for bad in ("", " ", "[::1", "a b", "x:99999999", "user@host", "a/b", "[evil]:1"):
        assert host_of(bad) is None, bad


def test_dns_rebinding_is_refused_on_and_off_loopback() -> None:
    for path in ROUTES:
        why = asks(path, host="attacker.example:8765")
        assert why is not None and why[0] == 400 and "--allowed-host" in why[1]
    assert asks(host="") is not None and asks(host="localhost:8765") is None
    assert asks(host="[::1]:8765") is None
    exposed = allowed_hosts("0.0.0.0", ["ui.lab.example"], host_names=names)
    for host, ok in (("gpu-box:8765", True), ("192.0.2.10:8765", True),
                     ("ui.lab.example", True), ("attacker.example:8765", False),
                     ("gpu-box.attacker.example", False), ("0.0.0.0:8765", False)):
        assert (refusal("GET", "/", {"host": host}, exposed) is None) is ok, host


def test_cross_site_requests_are_refused_on_every_route() -> None:
    evil = {"origin": "https://evil.example", "sec_fetch_site": "cross-site",
            "sec_fetch_mode": "no-cors", "sec_fetch_dest": "image"}
    for path in ROUTES:
        assert asks(path, **evil) == (403, "cross-site request refused: open the page from "
                                           "its own address")
        # Either header alone is enough (an old browser sends no Sec-Fetch-*).
        assert asks(path, origin="https://evil.example") is not None
        assert asks(path, origin="null") is not None
        assert asks(path, sec_fetch_site="cross-site") is not None
        # Another port of the same host is another origin: a local app elsewhere is a site.
        assert asks(path, sec_fetch_site="same-site", sec_fetch_mode="cors") is not None
        assert asks(path, origin="http://127.0.0.1:9999") is not None
        # The page's own requests, and a person typing the address, pass.
        assert asks(path, sec_fetch_site="same-origin", sec_fetch_mode="cors") is None
        assert asks(path, origin="http://127.0.0.1:8765", sec_fetch_site="same-origin") is None
        assert asks(path, sec_fetch_site="none", sec_fetch_mode="navigate") is None
        assert asks(path) is None  # (curl: no browser's headers)
        # A link from elsewhere opens a page (a top-level navigation), nothing else: not a
        # stream, an image, an asset, nor a frame.
        navigate = {"sec_fetch_site": "cross-site", "sec_fetch_mode": "navigate",
                    "sec_fetch_dest": "document"}
        assert (asks(path, **navigate) is None) is (path in PAGES), path
        framed = {**navigate, "sec_fetch_dest": "iframe"}
        assert asks(path, **framed) is not None


@given(st.text(max_size=200), st.sampled_from(ROUTES), st.text(max_size=40))
def test_the_policy_is_total(host: str, path: str, site: str) -> None:
    why = refusal("GET", path, {"host": host, "sec-fetch-site": site, "origin": host}, LOCAL)
    assert why is None or why[0] in (400, 403)


def test_a_log_line_is_bounded_and_shows_what_a_terminal_shows() -> None:
    bar = "".join(f"\r{p:3d}%|{'#' * (p // 10):10s}| {p}/100" for p in range(101)) * 200
    assert shown_line(bar) == "100%|##########| 100/100"
    assert shown_line("done\r\n".rstrip("\n")) == "done"  # a CRLF line
    huge = "x" * 2_000_000
    cut = shown_line(huge)
    assert cut.startswith("x" * LINE_LIMIT) and len(cut) < LINE_LIMIT + 64
    assert cut.endswith(f"… [line cut: {2_000_000 - LINE_LIMIT:,} more characters]")
    assert shown_line("plain") == "plain" and shown_line("\r\r") == ""


def test_a_session_keeps_bounded_lines_and_characters() -> None:
    loop = asyncio.new_event_loop()
    try:
        session = TaskSession(None, ("ml", "train"), loop)  # type: ignore[arg-type]
        printer = _PagePrinter(session)
        big = "y" * 3_000_000
        for i in range(300):
            printer.line("train-0", "main", "", f"{i} {big}")
        assert len(session.lines) <= LOG_LINES
        assert session.chars == sum(len(line.text) for line in session.lines) <= LOG_CHARS
        newest = session.lines[-1].text
        assert newest.startswith("[train-0/main] 299 yyy") and "[line cut: " in newest
        assert len(newest) < LINE_LIMIT + 100
        for i in range(2000):  # short lines: the line bound holds, the oldest leave first
            printer.line("train-0", "main", "", f"short {i}")
        assert len(session.lines) == LOG_LINES and session.lines[0].text.endswith("short 1000")
        assert session.chars == sum(len(line.text) for line in session.lines)
    finally:
        loop.close()


def test_sessions_are_bounded_per_server_and_an_idle_one_makes_room(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TaskSession, "start", lambda self: None)
    stopped: list[tuple[str, str]] = []
    monkeypatch.setattr(TaskSession, "stop", lambda self: stopped.append(self.key))

    async def scenario() -> None:
        sessions = Sessions(None)  # type: ignore[arg-type]
        opened = [sessions.open(("ml", f"t{i}")) for i in range(MAX_SESSIONS)]
        assert all(s is not None for s in opened)
        assert sessions.open(("ml", "one-more")) is None  # every one has a tab
        assert sessions.open(("ml", "t0")) is opened[0]  # a task already followed: shared
        assert opened[0] is not None and opened[0].users == 2
        last = opened[-1]
        assert last is not None
        sessions.close(last)  # its tab closed: kept for a reload, until room is needed
        assert sessions.open(("ml", "one-more")) is not None
        assert stopped == [last.key] and len(sessions.open_sessions) == MAX_SESSIONS

    asyncio.run(scenario())


@given(st.text(alphabet=st.sampled_from("ab \r\n\t…é"), max_size=3 * LINE_LIMIT))
def test_any_line_is_shown_bounded(text: str) -> None:
    shown = shown_line(text)
    assert len(shown) <= LINE_LIMIT + len(" … [line cut: 99,999,999 more characters]")
    assert "\r" not in shown


def through_guard(allowed: frozenset[str], host: str, arrived_at: tuple[str, int] | None,
                  **headers: str) -> int:
    """The status the Guard answers a GET of / with (200: it reached the app), the
    connection having arrived on ``arrived_at`` (ASGI's ``server``: the local address)."""
    answered: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        answered.append(200)

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    async def receive() -> None:
        return None

    raw = [(b"host", host.encode())] + [(k.replace("_", "-").encode(), v.encode())
                                        for k, v in headers.items()]
    scope = {"type": "http", "method": "GET", "path": "/", "headers": raw,
             "server": arrived_at}
    asyncio.run(Guard(app, allowed)(scope, receive, send))
    return answered[0]


def test_served_on_every_address_the_address_a_request_reached_is_a_host() -> None:
    """Served on 0.0.0.0 or ::, a person types the machine's own address (one /etc/hosts
    does not name): the address the connection arrived on is this server's, a literal no
    page can rebind. A name is still checked, and so is the site a request comes from."""
    nameless = allowed_hosts("0.0.0.0", host_names=set)
    assert through_guard(nameless, "192.0.2.2:8765", ("192.0.2.2", 8765)) == 200
    assert through_guard(nameless, "192.0.2.2", ("192.0.2.2", 8765)) == 200
    # On a dual-stack socket (::) an IPv4 client arrives on the mapped address.
    anywhere = allowed_hosts("::", host_names=set)
    assert through_guard(anywhere, "192.0.2.2:8765", ("::ffff:192.0.2.2", 8765)) == 200
    assert through_guard(anywhere, "[2001:db8::2]:8765", ("2001:db8:0::2", 8765)) == 200
    assert through_guard(nameless, "127.0.0.2:8765", ("127.0.0.2", 8765)) == 200
    # Another address of this host, one the request did not reach, a name resolving to the
    # address reached (rebinding), or no local address (a Unix socket): refused.
    for host, arrived in (("192.0.2.3:8765", ("192.0.2.2", 8765)),
                          ("attacker.example:8765", ("192.0.2.2", 8765)),
                          ("0.0.0.0:8765", ("0.0.0.0", 8765)),
                          ("192.0.2.2:8765", None)):
        assert through_guard(nameless, host, arrived) == 400, (host, arrived)
    # The site check stays at that address.
    assert through_guard(nameless, "192.0.2.2:8765", ("192.0.2.2", 8765),
                         origin="https://evil.example") == 403
    assert through_guard(nameless, "192.0.2.2:8765", ("192.0.2.2", 8765),
                         origin="http://192.0.2.2:8765", sec_fetch_site="same-origin") == 200


@given(st.ip_addresses(), st.ip_addresses(), st.sampled_from(ROUTES))
def test_the_address_reached_admits_itself_and_no_other(
        reached: ipaddress.IPv4Address | ipaddress.IPv6Address,
        named: ipaddress.IPv4Address | ipaddress.IPv6Address, path: str) -> None:
    at = address_reached(str(reached))
    host = f"[{named}]:8765" if named.version == 6 else f"{named}:8765"
    why = refusal("GET", path, {"host": host}, frozenset(), at)
    assert (why is None) is (at is not None and host_of(host) == at), (reached, named)
