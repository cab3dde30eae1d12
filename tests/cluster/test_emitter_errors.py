"""Delivery errors against the real API server: 429 + Retry-After (through a throttling
proxy on loopback) is honoured and retried; 403 and 422 are counted and never retried."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.cluster.test_emitter import bus_events, emitter_for, parsed_events, workload
from tidings.emitter import Emitter, EmitterConfig
from tidings.emitter.transport import KubeTransport
from tidings.kube import Client, ClusterConfig, connect
from tidings.kube.auth import NoAuth, bearer
from tidings.schemas.wire.payloads import LogLink
from tools.devcluster import ControlPlane

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class ThrottlingProxy(ThreadingHTTPServer):
    """Plain HTTP on 127.0.0.1; answers the first ``throttle`` POSTs with 429 + Retry-After,
    forwards everything else to the real API server over TLS."""

    daemon_threads = True

    def __init__(self, upstream: str, ca_file: str, throttle: int, retry_after: int) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = urlsplit(upstream)
        self.tls = ssl.create_default_context(cafile=ca_file)
        self.throttle = throttle
        self.retry_after = retry_after
        self.posts: list[tuple[float, int]] = []  # (monotonic time, status answered)
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ThrottlingProxy

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._relay()

    def do_POST(self) -> None:
        self._relay()

    def _relay(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv = self.server
        if self.command == "POST":
            with srv.lock:
                throttled = len([1 for _, s in srv.posts if s == 429]) < srv.throttle
                if throttled:
                    srv.posts.append((time.monotonic(), 429))
            if throttled:
                status = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "TooManyRequests", "code": 429,
                                     "message": "slow down"}).encode()
                self.send_response(429)
                self.send_header("Retry-After", str(srv.retry_after))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(status)))
                self.end_headers()
                self.wfile.write(status)
                return
        up = http.client.HTTPSConnection(srv.upstream.hostname, srv.upstream.port,
                                         context=srv.tls, timeout=10)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        up.request(self.command, self.path, body=body, headers=headers)
        resp = up.getresponse()
        data = resp.read()
        up.close()
        if self.command == "POST":
            with srv.lock:
                srv.posts.append((time.monotonic(), resp.status))
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[ThrottlingProxy]:
    srv = ThrottlingProxy(control_plane.server, str(control_plane.ca_file), throttle=2,
                          retry_after=1)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_429_retry_after_is_honoured_then_delivered(control_plane: ControlPlane, admin: Any,
                                                    namespace: str,
                                                    proxy: ThrottlingProxy) -> None:
    me = workload(admin, namespace)
    kube = Client(ClusterConfig(server=proxy.url,
                                auth=NoAuth(bearer(control_plane.tokens["admin"]))))
    # Backoff alone would retry within ~0.1 s; only Retry-After can explain 1 s gaps.
    em = Emitter(EmitterConfig(retry_initial_s=0.01, retry_max_s=0.05), identity=me,
                 transport=KubeTransport(kube))
    em.log_link("wandb", "https://wandb.ai/acme/runs/1")
    assert em.flush(20), em.stats()
    statuses = [s for _, s in proxy.posts]
    assert statuses == [429, 429, 201]
    gaps = [b[0] - a[0] for a, b in zip(proxy.posts, proxy.posts[1:], strict=False)]
    assert all(g >= 0.95 for g in gaps), gaps
    s = em.stats()
    assert (s["delivered"], s["api_calls"], s["retries"], s["refused"]) == (1, 3, 2, 0)
    (event,) = parsed_events(admin, namespace)
    assert isinstance(event.payload, LogLink)


def test_403_is_counted_and_not_retried(control_plane: ControlPlane, admin: Any,
                                        namespace: str) -> None:
    me = workload(admin, namespace)
    em = emitter_for(control_plane, me, user="alice")  # alice may not create events
    em.log_link("a", "https://example.com/a")
    em.log_link("b", "https://example.com/b")
    t0 = time.monotonic()
    assert not em.flush(15)  # settled at once (refused is final), and nothing delivered
    assert time.monotonic() - t0 < 5
    s = em.stats()
    assert (s["refused"], s["refused_by_status"], s["api_calls"], s["retries"]) == \
        (2, {403: 2}, 2, 0)
    assert "Forbidden" in s["last_error"]
    assert bus_events(admin, namespace) == []


class Corrupting(KubeTransport):
    """Sends what the emitter built, but with a note one byte over the limit: the emitter
    itself never builds such an event, so the API server's 422 has to be provoked."""

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        return super().post(namespace, {**body, "note": "é" * 512 + "x"})


def test_422_is_counted_and_not_retried(control_plane: ControlPlane, admin: Any,
                                        namespace: str) -> None:
    me = workload(admin, namespace)
    em = Emitter(EmitterConfig(retry_initial_s=0.05, retry_max_s=1.0), identity=me,
                 transport=Corrupting(connect(str(control_plane.kubeconfig("admin")))))
    em.log_link("a", "https://example.com/a")
    em.progress(1.0, "done", final=True)
    assert not em.flush(15)  # refused: settled, not delivered
    s = em.stats()
    assert (s["refused"], s["refused_by_status"], s["api_calls"], s["retries"]) == \
        (2, {422: 2}, 2, 0)
    assert "Invalid" in s["last_error"]
    assert bus_events(admin, namespace) == []
