"""Who may ask `tidings ui` anything: the Host a request names (against DNS rebinding) and the
site it comes from (against cross-site requests), decided by one pure function, ``refusal``,
and applied to every route by one ASGI middleware, ``Guard``.

The server answers with the user's own credentials, and its GETs do work (a log session, API
requests), so a page the user merely visits must get nothing from it: not a read (the Host
check: a rebound name is refused), not a stream (the site check: the browser's own
``Sec-Fetch-Site`` and ``Origin`` say where a request comes from).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")
# Another site may only navigate a browser tab to a page (a link to it works), never load a
# stream, an image or an asset from this server, nor frame it.
_PAGES = re.compile(r"^/(tasks/[^/]+/[^/]+)?\Z")
_HOST = re.compile(r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\[\]/@\s]+))"
                   r"(?::(?P<port>\d{1,5}))?\Z")


def is_loopback(address: str) -> bool:
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str | None:
    """The host a Host header (or a flag) names: lowercase, no port, no brackets, no trailing
    dot, an IPv6 address in its compressed form; None when it is malformed."""
    text = header.strip()
    if text.count(":") > 1 and not text.startswith("["):  # a bare IPv6 address (a flag's)
        try:
            return str(ipaddress.IPv6Address(text))
        except ValueError:
            return None
    m = _HOST.match(text)
    if m is None:
        return None
    if m["ipv6"] is not None:
        try:
            return str(ipaddress.IPv6Address(m["ipv6"]))
        except ValueError:
            return None
    return m["name"].lower().rstrip(".")


def this_hosts_names() -> set[str]:
    """This machine's names and the addresses they resolve to (what a person types to reach
    a server listening on every address)."""
    names = {socket.gethostname()}
    try:
        names.add(socket.getfqdn())
        for info in socket.getaddrinfo(socket.gethostname(), None):
            names.add(str(info[4][0]))
    except OSError:
        pass
    return {n.lower() for n in names if n}


def allowed_hosts(address: str, extra: Iterable[str] = (),
                  host_names: Callable[[], set[str]] = this_hosts_names) -> frozenset[str]:
    """The hosts a request may name: the loopback names, the address served and, when it is
    not a loopback one, this host's names; and ``extra`` (``--allowed-host``)."""
    hosts = {h for h in (host_of(a) for a in (*LOOPBACK_HOSTS, *extra)) if h}
    served = address.strip("[]")
    if served not in WILDCARD_ADDRESSES:
        hosts.add(host_of(f"[{served}]" if ":" in served else served) or served.lower())
    if not is_loopback(served):
        hosts |= host_names()
    return frozenset(hosts)


def address_reached(address: str | None) -> str | None:
    """The address a connection arrived on (ASGI's ``server``), as ``host_of`` gives a Host
    naming it: an IPv4 client of a dual-stack socket as its IPv4 address; None for no
    address (a Unix socket) or a wildcard one."""
    try:
        ip = ipaddress.ip_address((address or "").split("%")[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return None if ip.is_unspecified else str(ip)


def refusal(method: str, path: str, headers: dict[str, str],
            allowed: frozenset[str], reached: str | None = None) -> tuple[int, str] | None:
    """Why this request is refused, as (HTTP status, one line), or None. ``headers``: the
    request's, with lowercase names; ``reached``: the address its connection arrived on
    (``address_reached``'s form), a Host too: served on every address, it is the machine's
    own address a person typed, whether or not a name resolves to it, and an address
    literal is not a name a page elsewhere could rebind."""
    host_header = headers.get("host", "")
    host = host_of(host_header)
    if host is None or (host not in allowed and host != reached):
        return 400, (f"host {host_header[:100]!r} is not this server's: a page elsewhere "
                     "cannot rebind a name to it (tidings ui --allowed-host NAME allows one)")
    origin = headers.get("origin")
    if origin is not None and origin.lower() != f"http://{host_header.strip().lower()}":
        return 403, "cross-site request refused: open the page from its own address"
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        navigates = (headers.get("sec-fetch-mode") == "navigate"
                     and headers.get("sec-fetch-dest") == "document")
        if not (navigates and method in ("GET", "HEAD") and _PAGES.match(path)):
            return 403, "cross-site request refused: open the page from its own address"
    return None


ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                    Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]


class Guard:
    """Refuses, on every route, what ``refusal`` refuses: a plain-text answer, before any
    route runs (so a refused request opens nothing and asks the cluster nothing)."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        server = scope.get("server")
        reached = address_reached(str(server[0]) if server else None)
        why = refusal(scope.get("method", "GET"), scope.get("path", "/"), headers, self.allowed,
                      reached)
        if why is None:
            await self.app(scope, receive, send)
            return
        status, text = why
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": f"{text}\n".encode()})
