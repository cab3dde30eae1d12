"""HTTP endpoints: /healthz, /readyz, /metrics (Prometheus) and ``GET /tasks/<ns>/<name>``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import Metrics


class Endpoints:
    """Serves one watcher process. ``task_status(ns, name)`` returns a JSON-able dict or None."""

    def __init__(self, metrics: Metrics, *, ready: Callable[[], bool],
                 task_status: Callable[[str, str], Any], host: str = "0.0.0.0",
                 port: int = 0) -> None:
        self.metrics = metrics

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet access log
                pass

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
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
                    status = task_status(parts[2], parts[3]) if len(parts) == 4 else None
                    if status is None:
                        self._send(404, b'{"error":"unknown task"}', "application/json")
                    else:
                        self._send(200, orjson.dumps(status), "application/json")
                else:
                    self._send(404, b"not found")

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
