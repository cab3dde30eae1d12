"""HTTP endpoints: /healthz, /readyz, /metrics (Prometheus) open; ``GET /tasks/<ns>/<name>``
only for callers the API server lets ``get`` that TaskFeedback (see auth.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .auth import Authorizer
from .metrics import Metrics


class Endpoints:
    """Serves one watcher process. ``task_status(ns, name)`` returns a JSON-able dict or None;
    ``authorizer`` decides who may read it."""

    def __init__(self, metrics: Metrics, *, ready: Callable[[], bool],
                 task_status: Callable[[str, str], Any], authorizer: Authorizer,
                 host: str = "0.0.0.0", port: int = 0) -> None:
        self.metrics = metrics

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet access log
                pass

            def _send(self, code: int, body: bytes, ctype: str = "text/plain",
                      headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._send(200, b"ok")
                elif path == "/readyz":
                    ok = ready()
                    self._send(200 if ok else 503, b"ok" if ok else b"not ready")
                elif path == "/metrics":
                    self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
                elif path.startswith("/tasks/"):
                    parts = path.split("/")
                    if len(parts) != 4 or not parts[2] or not parts[3]:
                        self._send(404, b'{"error":"unknown task"}', "application/json")
                        return
                    if not self._authorized(parts[2], parts[3]):
                        return
                    status = task_status(parts[2], parts[3])
                    if status is None:
                        self._send(404, b'{"error":"unknown task"}', "application/json")
                    else:
                        self._send(200, orjson.dumps(status), "application/json")
                else:
                    self._send(404, b"not found")

            def _authorized(self, namespace: str, name: str) -> bool:
                """Answer 401/403/503 (counted by reason) unless the caller may read it."""
                d = authorizer.check(self.headers.get("Authorization"), namespace, name)
                if d.code == 200:
                    return True
                metrics.http_denied.labels(d.reason).inc()
                self._send(d.code, orjson.dumps({"error": d.message, "reason": d.reason}),
                           "application/json",
                           {"WWW-Authenticate": 'Bearer realm="tidings"'} if d.code == 401
                           else None)
                return False

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="http",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
