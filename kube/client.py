"""The one HTTP client to the API server: one urllib3 connection pool, a cached auth header,
orjson bodies, and the request, pagination and watch-line loops written once.

A request returns the 2xx body or raises KubeError. A 401 to credentials that can be renewed
(a rotated token file, an exec plugin) renews them and sends the request once more; nothing
else is retried here: callers own their retry policy (``KubeError.retryable``).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson
import urllib3
from urllib3.response import BaseHTTPResponse

from .auth import CredentialError
from .config import ClusterConfig
from .errors import ConfigError, KubeError

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# Accept: the answer as the object's metadata only (kind PartialObjectMetadata), for a write
# whose caller needs no more than the new resourceVersion: the API server does not encode,
# and the client does not read, the whole object back.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# A list's answer as its items' metadata only (PartialObjectMetadataList; a watch takes
# METADATA_ONLY, each event's object as PartialObjectMetadata).
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"

# (connect, read) seconds.
DEFAULT_TIMEOUT = (5.0, 30.0)

Query = Mapping[str, Any] | Sequence[tuple[str, Any]] | None
Timeout = tuple[float, float | None] | float | None


class Client:
    """Thread-safe. ``namespace`` is the one the configuration means (context or pod)."""

    def __init__(self, config: ClusterConfig, *, maxsize: int = 10,
                 user_agent: str = "tidings", timeout: tuple[float, float] = DEFAULT_TIMEOUT,
                 ) -> None:
        self.config = config
        self.server = config.server
        self.namespace = config.namespace
        self._auth = config.auth
        self._maxsize = maxsize
        self._default_timeout = _timeout(timeout)
        self._timeouts: dict[Any, urllib3.Timeout] = {}
        base: dict[str, str] = {"Accept": JSON, "User-Agent": user_agent}
        self._extra = config.impersonate.headers() if config.impersonate else []
        self._base = base
        self._hdr_auth: str | None = "\0"  # the auth value the header cache was built for
        self._hdr_cache: dict[tuple[str | None, str | None], Any] = {}
        self._lock = threading.Lock()
        self._cert_generation = -1
        self._open_pool()

    # -- plumbing -------------------------------------------------------------------------

    def _open_pool(self) -> None:
        cfg = self.config
        self._cert_generation = self._auth.cert_generation
        kw: dict[str, Any] = {"maxsize": self._maxsize, "retries": False, "block": False}
        url = urlsplit(cfg.server)
        if url.scheme == "https":
            kw["ssl_context"] = self._ssl_context()
            kw["cert_reqs"] = "CERT_NONE" if cfg.insecure else "CERT_REQUIRED"
            if cfg.insecure:
                kw["assert_hostname"] = False
            if cfg.tls_server_name:
                kw["server_hostname"] = cfg.tls_server_name
        manager = _proxy_manager(cfg.proxy_url, kw) if cfg.proxy_url else \
            urllib3.PoolManager(**kw)
        old = getattr(self, "_manager", None)
        self._manager = manager
        self._path_prefix = url.path.rstrip("/")
        if cfg.proxy_url and url.scheme == "http":
            # Plain HTTP through a proxy: the request line carries the absolute URL.
            self._urlopen: Callable[..., BaseHTTPResponse] = manager.urlopen
            self._path_prefix = cfg.server.rstrip("/")
        else:
            self._urlopen = manager.connection_from_url(cfg.server).urlopen
        if old is not None:
            old.clear()

    def _ssl_context(self) -> ssl.SSLContext:
        cfg = self.config
        try:
            if cfg.insecure:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            else:
                ctx = ssl.create_default_context(
                    cafile=cfg.ca_file, cadata=cfg.ca_data.decode() if cfg.ca_data else None)
                # kubectl (Go's crypto/x509) does not apply OpenSSL's strict RFC 5280 checks
                # (Python 3.13 turns them on); a CA kubectl accepts must work here too.
                ctx.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
            cert = self._auth.cert or (
                (cfg.cert_data, cfg.key_data) if cfg.cert_data and cfg.key_data else None)
            if cert is not None:
                _load_pem_pair(ctx, cert[0], cert[1])
            elif cfg.cert_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise ConfigError(f"unusable TLS settings ({cfg.source}): {e}") from None
        return ctx

    def _headers(self, auth: str | None, content_type: str | None,
                 accept: str | None = None) -> Any:
        if auth != self._hdr_auth:
            self._hdr_cache = {}
            self._hdr_auth = auth
        key = (content_type, accept)
        hdrs = self._hdr_cache.get(key)
        if hdrs is None:
            h: dict[str, str] = dict(self._base)
            if auth:
                h["Authorization"] = auth
            if content_type:
                h["Content-Type"] = content_type
            if accept:
                h["Accept"] = accept
            if self._extra:  # repeated Impersonate-Group lines need a multi-dict
                hd = urllib3.HTTPHeaderDict(h)
                for k, v in self._extra:
                    hd.add(k, v)
                hdrs = hd
            else:
                hdrs = h
            self._hdr_cache[key] = hdrs
        return hdrs

    def _t(self, timeout: Timeout) -> urllib3.Timeout:
        if timeout is None:
            return self._default_timeout
        t = self._timeouts.get(timeout)
        if t is None:
            t = self._timeouts[timeout] = _timeout(timeout)
        return t

    def open(self, method: str, path: str, *, query: Query = None, data: bytes | None = None,
             content_type: str | None = None, timeout: Timeout = None,
             stream: bool = False, accept: str | None = None) -> BaseHTTPResponse:
        """Send one request; a 2xx response (read unless ``stream``), else KubeError.
        ``accept``: another Accept header than JSON (e.g. ``METADATA_ONLY``)."""
        url = self._path_prefix + path
        if query:
            url += "?" + urlencode(query, doseq=True)
        t = self._t(timeout)
        auth_src = self._auth
        for attempt in (0, 1):
            try:
                auth = auth_src.header()
            except CredentialError as e:
                raise KubeError(0, str(e), reason="CredentialError") from None
            if auth_src.cert_generation != self._cert_generation:
                with self._lock:
                    if auth_src.cert_generation != self._cert_generation:
                        self._open_pool()
            try:
                resp = self._urlopen(method, url, body=data,
                                     headers=self._headers(auth, content_type, accept),
                                     timeout=t,
                                     retries=False, redirect=False, preload_content=not stream,
                                     assert_same_host=False)
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise _connection_error(e, self.server) from None
            status = resp.status
            if 200 <= status <= 299:
                return resp
            data_out = _read_quietly(resp)
            if status == 401 and attempt == 0:
                try:
                    renewed = auth_src.refresh(auth)
                except CredentialError as e:
                    raise KubeError(401, str(e), reason="Unauthorized") from None
                if renewed:
                    continue
            raise KubeError.from_response(status, data_out, resp.headers.get("Retry-After"),
                                          str(resp.reason or ""))
        raise AssertionError("unreachable")

    # -- requests -------------------------------------------------------------------------

    def request(self, method: str, path: str, *, query: Query = None, body: Any = None,
                data: bytes | None = None, content_type: str | None = None,
                timeout: Timeout = None, accept: str | None = None) -> Any:
        """Send ``body`` (encoded with orjson) or raw ``data``; the parsed JSON answer."""
        if body is not None:
            data = orjson.dumps(body)
            content_type = content_type or JSON
        resp = self.open(method, path, query=query, data=data, content_type=content_type,
                         timeout=timeout, accept=accept)
        raw = resp.data
        if not raw:
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise KubeError(0, f"the answer to {method} {path} is not JSON",
                            reason="BadResponse", body=raw[:300]) from None

    def get(self, path: str, query: Query = None, *, timeout: Timeout = None) -> Any:
        return self.request("GET", path, query=query, timeout=timeout)

    def pages(self, path: str, query: Query = None, *, limit: int = 500,
              timeout: Timeout = None) -> Iterator[dict[str, Any]]:
        """Each page of a list (``limit``/``continue``) as it arrives."""
        return paginate(lambda q: self.get(path, q, timeout=timeout), query, limit)

    def list_all(self, path: str, query: Query = None, *, limit: int = 500,
                 timeout: Timeout = None) -> tuple[list[dict[str, Any]], str]:
        """Every item of a list, and the resourceVersion of its last page (to watch from)."""
        items: list[dict[str, Any]] = []
        rv = ""
        for page in self.pages(path, query, limit=limit, timeout=timeout):
            raw = page.get("items")
            items.extend(i for i in (raw if isinstance(raw, list) else []) if isinstance(i, dict))
            rv = str((page.get("metadata") or {}).get("resourceVersion") or "")
        return items, rv

    def stream(self, path: str, query: Query = None, *,
               timeout: Timeout = None, accept: str | None = None) -> BaseHTTPResponse:
        """An open streaming GET (a watch or a log follow); read it with ``iter_lines``
        and ``close`` it (another thread may close it to stop the reader)."""
        return self.open("GET", path, query=query, timeout=timeout, stream=True,
                         accept=accept)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._manager.clear()


def paginate(get: Callable[[list[tuple[str, Any]]], Any], query: Query = None,
             limit: int = 500) -> Iterator[dict[str, Any]]:
    """The one pagination loop: ``get(query)`` for each page of a list, following
    ``metadata.continue`` until the server has no more."""
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query or [])
    base = [(k, v) for k, v in pairs if k not in ("limit", "continue")]
    cont = ""
    while True:
        page = get([*base, ("limit", str(limit)), *([("continue", cont)] if cont else [])])
        if not isinstance(page, dict):
            raise KubeError(0, "the answer to a list is not an object", reason="BadResponse")
        yield page
        cont = str((page.get("metadata") or {}).get("continue") or "")
        if not cont:
            return


def iter_lines(resp: BaseHTTPResponse, *, skip_empty: bool = False) -> Iterator[bytes]:
    """The lines of a streaming response as they arrive, without their newline. A broken
    stream (reset, read timeout, truncated chunk) raises KubeError with status 0."""
    for batch in iter_line_batches(resp, skip_empty=skip_empty):
        yield from batch


def iter_line_batches(resp: BaseHTTPResponse, *, skip_empty: bool = False
                      ) -> Iterator[list[bytes]]:
    """``iter_lines``, one list per read: the lines each chunk completed (never empty), so a
    consumer can hand on a whole read at once."""
    buf = b""
    try:
        for chunk in _chunks(resp):
            if b"\n" not in chunk:
                buf += chunk
                continue
            *lines, rest = (buf + chunk).split(b"\n")
            buf = rest
            if skip_empty:
                lines = [line for line in lines if line]
            if lines:
                yield lines
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
        raise KubeError(0, f"stream broke: {type(e).__name__}: {e}",
                        reason=type(e).__name__) from None
    if buf:  # the last line had no newline; whitespace is content (a log line of a tab)
        yield [buf]


def _chunks(resp: BaseHTTPResponse) -> Iterable[bytes]:
    if getattr(resp, "chunked", False):
        # Chunked (watches, log follows): each chunk as soon as it is there.
        return resp.stream(None)
    read1 = getattr(resp, "read1", None)
    if read1 is None:  # urllib3 < 2.3: blocking reads of up to 64 KiB
        return resp.stream(64 * 1024)
    return iter(lambda: read1(64 * 1024), b"")


def close_stream(resp: BaseHTTPResponse) -> None:
    """Stop a stream from any thread: the reader's next read fails or ends."""
    with contextlib.suppress(Exception):
        resp.shutdown()  # urllib3 >= 2.3
    with contextlib.suppress(Exception):
        resp.release_conn()
    with contextlib.suppress(Exception):
        resp.close()


def _read_quietly(resp: BaseHTTPResponse) -> bytes:
    try:
        return bytes(resp.data or b"")
    except Exception:
        return b""
    finally:
        with contextlib.suppress(Exception):
            resp.release_conn()


def _timeout(t: Timeout) -> urllib3.Timeout:
    if t is None:
        return urllib3.Timeout(connect=DEFAULT_TIMEOUT[0], read=DEFAULT_TIMEOUT[1])
    if isinstance(t, tuple):
        return urllib3.Timeout(connect=t[0], read=t[1])
    return urllib3.Timeout(total=t)


def _connection_error(e: BaseException, server: str) -> KubeError:
    inner = getattr(e, "reason", None) or e
    text = str(inner)
    low = text.lower()
    if "refused" in low:
        text = "connection refused"
    elif "timed out" in low:
        text = "timed out"
    elif isinstance(inner, ssl.SSLError) or "certificate" in low or "ssl" in low:
        text = f"TLS error: {text}"
    return KubeError(0, f"cannot reach {server}: {text[:240]}", reason=type(inner).__name__)


def _load_pem_pair(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads client certificates from files only: write them to a private directory,
    load them, and remove them at once (the key stays in the context's memory)."""
    with tempfile.TemporaryDirectory(prefix="tidings-tls-") as d:
        cpath, kpath = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        for path, data in ((cpath, cert), (kpath, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cpath, kpath)


def _proxy_manager(proxy_url: str, kw: dict[str, Any]) -> urllib3.PoolManager:
    scheme = urlsplit(proxy_url).scheme.lower()
    if scheme.startswith("socks"):
        try:
            from urllib3.contrib.socks import SOCKSProxyManager
        except ImportError:
            raise ConfigError(f"proxy-url {proxy_url}: SOCKS proxies need PySocks "
                              "(pip install 'urllib3[socks]')") from None
        return SOCKSProxyManager(proxy_url, **kw)
    if scheme not in ("http", "https"):
        raise ConfigError(f"proxy-url {proxy_url}: unsupported scheme {scheme!r}")
    parts = urlsplit(proxy_url)
    headers = None
    if parts.username:
        headers = urllib3.make_headers(
            proxy_basic_auth=f"{parts.username}:{parts.password or ''}")
    return urllib3.ProxyManager(proxy_url, proxy_headers=headers, **kw)
