"""The watcher's raw API access, on tidings.kube: JSON requests (orjson in, orjson out, the
client's models never used) and watch streams as lines.

One error type for the whole project: ``KubeError`` is tidings.kube's (its ``retryable`` is
the one rule: no answer, 429, 5xx).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any

from tidings.kube import (
    JSON,
    JSON_PATCH,
    MERGE_PATCH,
    Client,
    KubeError,
    iter_line_batches,
    iter_lines,
)
from tidings.kube import load as load_config

__all__ = ["JSON", "JSON_PATCH", "MERGE_PATCH", "Kube", "KubeError", "load_client"]


def load_client(kubeconfig: str | None = None, context: str | None = None,
                pool_size: int = 16) -> Client:
    """A client for what kubectl would use (a kubeconfig, else the pod's service account).
    Raises tidings.kube.ConfigError."""
    return Client(load_config(kubeconfig, context), maxsize=pool_size,
                  user_agent="tidings-watcher")


class Kube:
    """Raw requests: ``request`` returns parsed JSON (or raises KubeError); ``stream`` lines."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def request(self, method: str, path: str, *, query: list[tuple[str, Any]] | None = None,
                body: Any = None, data: bytes | None = None, content_type: str | None = None,
                timeout: Any = (5, 30)) -> Any:
        """``body`` is encoded with orjson; ``data`` is sent as it is (already encoded)."""
        return self.client.request(method, path, query=query, body=body, data=data,
                                   content_type=content_type, timeout=timeout)

    def stream(self, path: str, *, query: list[tuple[str, Any]], timeout: Any,
               on_open: Callable[[Any], None] | None = None, batches: bool = False
               ) -> Generator[Any, None, None]:
        """GET ``path`` and yield raw non-empty lines (a watch stream); with ``batches``, a
        list of the lines each socket read completed. Raises KubeError on a non-200 answer
        or a broken stream.

        ``on_open`` receives the urllib3 response, so another thread can shut it down.
        """
        resp = self.client.stream(path, query, timeout=timeout)
        if on_open is not None:
            on_open(resp)
        try:
            if batches:
                yield from iter_line_batches(resp, skip_empty=True)
            else:
                yield from iter_lines(resp, skip_empty=True)
        finally:
            with contextlib.suppress(Exception):
                resp.release_conn()
            with contextlib.suppress(Exception):
                resp.close()
