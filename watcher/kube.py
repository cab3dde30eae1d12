"""Thin raw HTTP access to the API server through the official client's connection and auth.

Bodies stay bytes (orjson in, orjson out): the client's model (de)serialisation is never used
on the watcher's paths.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import orjson

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """A non-2xx answer (status 0: no answer at all, i.e. a connection error)."""

    def __init__(self, status: int, message: str, body: bytes = b"") -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.body = body

    @property
    def retryable(self) -> bool:
        return self.status in (0, 409, 429) or self.status >= 500


def load_client(kubeconfig: str | None = None, context: str | None = None,
                pool_size: int = 16) -> Any:
    """An ApiClient from a kubeconfig (or the in-cluster service account when none is found)."""
    import os

    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig or context or os.environ.get("KUBECONFIG") or \
            os.path.exists(os.path.expanduser("~/.kube/config")):
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


class Kube:
    """Raw requests: ``request`` returns parsed JSON (or raises KubeError); ``stream`` lines."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    def _send(self, method: str, path: str, query: list[tuple[str, Any]] | None,
              body: Any, content_type: str | None, timeout: Any) -> Any:
        headers = {"Accept": JSON}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            m, url, hdrs, _, _ = self.api.param_serialize(
                method, path, query_params=query or [], header_params=headers,
                auth_settings=["BearerToken"])
            raw = orjson.dumps(body) if body is not None else None
            # Straight to the urllib3 pool: the REST client would re-encode with json.dumps.
            resp = self.api.rest_client.pool_manager.request(
                m, url, body=raw, headers=hdrs, timeout=_timeout(timeout),
                preload_content=False, retries=False)
        except Exception as e:  # connection refused/reset, TLS, timeouts
            raise KubeError(0, f"{type(e).__name__}: {e}") from e
        return resp

    def request(self, method: str, path: str, *, query: list[tuple[str, Any]] | None = None,
                body: Any = None, content_type: str | None = None,
                timeout: Any = (5, 30)) -> Any:
        resp = self._send(method, path, query, body, content_type or (JSON if body is not None
                                                                      else None), timeout)
        try:
            data = resp.read()
        except Exception as e:
            raise KubeError(0, f"{type(e).__name__}: {e}") from e
        finally:
            resp.release_conn()
        if not 200 <= resp.status < 300:
            raise KubeError(resp.status, _message(data), data)
        return orjson.loads(data) if data else None

    def stream(self, path: str, *, query: list[tuple[str, Any]], timeout: Any,
               on_open: Callable[[Any], None] | None = None) -> Generator[bytes, None, None]:
        """GET ``path`` and yield raw lines (a watch stream). Raises KubeError on non-200.

        ``on_open`` receives the urllib3 response, so another thread can shut it down.
        """
        resp = self._send("GET", path, query, None, None, timeout)
        if on_open is not None:
            on_open(resp)
        try:
            if resp.status != 200:
                data = resp.read()
                raise KubeError(resp.status, _message(data), data)
            buf = b""
            try:
                for chunk in resp.stream(amt=None, decode_content=False):
                    buf += chunk
                    if b"\n" not in chunk:
                        continue
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if line:
                            yield line
            except KubeError:
                raise
            except Exception as e:  # read timeout, reset, truncated chunk
                raise KubeError(0, f"watch stream broke: {type(e).__name__}: {e}") from e
            if buf.strip():
                yield buf
        finally:
            resp.release_conn()
            resp.close()


def _timeout(t: Any) -> Any:
    import urllib3

    if t is None:
        return None
    if isinstance(t, tuple):
        return urllib3.Timeout(connect=t[0], read=t[1])
    return urllib3.Timeout(total=t)


def _message(data: bytes) -> str:
    try:
        msg = orjson.loads(data).get("message", "")
    except Exception:
        msg = data[:200].decode("utf-8", "replace")
    return str(msg)[:300]
