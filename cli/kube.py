"""Kubernetes access for the CLI: kubeconfig and context, raw JSON requests and streams, and
API/connection errors translated into the CLI's one-line errors and exit codes.

A small urllib3 client (tokens, client certificates, CAs) keeps `tidings state` quick to
start; kubeconfigs that need exec or auth-provider plugins go through the kubernetes
library's loader instead.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3

from tidings.cli.common import (
    EXIT_ERROR,
    EXIT_FORBIDDEN,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    CliError,
    check_namespace,
)

# (connect, read) seconds for ordinary requests; streams choose their own read timeout.
REQUEST_TIMEOUT = (5.0, 30.0)
_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True)
class Action:
    """What a request does, for error messages: verb, resource (plural.group), namespace."""

    verb: str
    resource: str
    namespace: str = ""  # "" = cluster-wide
    name: str = ""

    def describe(self) -> str:
        where = f"in namespace {self.namespace}" if self.namespace else "in any namespace"
        return f"{self.verb} {self.resource} {where}"


class ApiError(CliError):
    """A failed API request with its HTTP status (404 callers often recover)."""

    def __init__(self, message: str, code: int, status: int, action: Action | None) -> None:
        super().__init__(message, code)
        self.status = status
        self.action = action


def _status_message(status: int, body: bytes | str | None, reason: str = "") -> str:
    try:
        obj = orjson.loads(body or b"{}")
        msg = obj.get("message") if isinstance(obj, dict) else None
    except orjson.JSONDecodeError:
        msg = None
    return str(msg or reason or f"HTTP {status}")


def api_error(status: int, body: bytes | str | None, action: Action | None,
              reason: str = "") -> ApiError:
    doing = action.describe() if action else "make that request"
    if status == 403:
        return ApiError(f"forbidden: cannot {doing}", EXIT_FORBIDDEN, status, action)
    if status == 401:
        return ApiError("unauthorized: the cluster rejected the credentials of this context",
                        EXIT_FORBIDDEN, status, action)
    if status == 404:
        what = f"{action.resource} {action.name!r}" if action and action.name else doing
        return ApiError(f"not found: {what}", EXIT_NOT_FOUND, status, action)
    if status in (400, 422):
        return ApiError(f"invalid input: {_status_message(status, body, reason)}",
                        EXIT_INVALID, status, action)
    return ApiError(f"API error {status} while trying to {doing}: "
                    f"{_status_message(status, body, reason)}", EXIT_ERROR, status, action)


def translate_error(err: BaseException, server: str = "") -> CliError | None:
    """Map a connection-level exception to a CliError; None when it is not one of ours."""
    if isinstance(err, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError
                  | ssl.SSLError):
        reason = getattr(err, "reason", None) or err
        text = str(reason)
        if "Connection refused" in text or "Errno 111" in text:
            text = "connection refused"
        elif "SSL" in text or "certificate" in text:
            text = f"TLS error: {text}"
        at = f" at {server}" if server else ""
        return CliError(f"cannot reach the cluster{at}: {text}", EXIT_UNREACHABLE)
    return None


@dataclass
class Kube:
    """One connection pool to the API server, plus the namespace the user means."""

    pool: urllib3.PoolManager
    server: str
    headers: dict[str, str]
    namespace: str
    _closed: bool = field(default=False, repr=False)

    # -- plain requests ---------------------------------------------------------------------

    def _call(self, method: str, path: str, query: dict[str, Any] | None, action: Action | None,
              timeout: tuple[float, float | None], body: Any = None) -> Any:
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.server + path + ("?" + urlencode(params) if params else "")
        try:
            resp = self.pool.request(
                method, url, headers=self.headers,
                body=None if body is None else orjson.dumps(body),
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                preload_content=False, redirect=False)
        except Exception as err:
            mapped = translate_error(err, self.server)
            if mapped is None:
                raise
            raise mapped from None
        if not 200 <= resp.status <= 299:
            try:
                payload = resp.data
            except Exception:
                payload = b""
            finally:
                resp.release_conn()
            raise api_error(resp.status, payload, action, str(resp.reason or ""))
        return resp

    def get_json(self, path: str, query: dict[str, Any] | None = None, *,
                 action: Action | None = None) -> dict[str, Any]:
        resp = self._call("GET", path, query, action, REQUEST_TIMEOUT)
        try:
            data = resp.data
        except Exception as err:
            mapped = translate_error(err, self.server)
            raise (mapped or err) from None
        obj = orjson.loads(data)
        if not isinstance(obj, dict):
            raise CliError(f"unexpected answer from {path}", EXIT_ERROR)
        return obj

    def list_all(self, path: str, query: dict[str, Any] | None = None, *,
                 action: Action | None = None) -> tuple[list[dict[str, Any]], str]:
        """Every item of a list (paginated), and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        q = dict(query or {})
        q["limit"] = 500
        while True:
            page = self.get_json(path, q, action=action)
            raw = page.get("items")
            items.extend(i for i in (raw if isinstance(raw, list) else []) if isinstance(i, dict))
            meta = page.get("metadata") if isinstance(page.get("metadata"), dict) else {}
            cont = meta.get("continue")
            if not cont:
                return items, str(meta.get("resourceVersion") or "")
            q["continue"] = cont

    def stream(self, path: str, query: dict[str, Any], *, action: Action | None = None,
               read_timeout: float | None = 60.0) -> Any:
        """An open urllib3 response (watch or log stream). Iterate `lines(resp)`."""
        return self._call("GET", path, query, action, (REQUEST_TIMEOUT[0], read_timeout))

    # -- well-known paths ---------------------------------------------------------------------

    def list_events(self, namespace: str | None, selector: str
                    ) -> tuple[list[dict[str, Any]], str]:
        path = (f"/apis/events.k8s.io/v1/namespaces/{namespace}/events" if namespace
                else "/apis/events.k8s.io/v1/events")
        return self.list_all(path, {"fieldSelector": selector},
                             action=Action("list", "events.events.k8s.io", namespace or ""))

    def watch_events(self, namespace: str, selector: str, resource_version: str,
                     timeout_s: int = 60) -> Any:
        return self.stream(
            f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
            {"fieldSelector": selector, "watch": "true", "resourceVersion": resource_version,
             "allowWatchBookmarks": "true", "timeoutSeconds": timeout_s},
            action=Action("watch", "events.events.k8s.io", namespace),
            read_timeout=timeout_s + 15)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when it does not exist."""
        try:
            return self.get_json(f"/api/v1/namespaces/{namespace}/pods/{name}",
                                 action=Action("get", "pods", namespace, name))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                self.pool.clear()


def lines(resp: Any) -> Iterator[bytes]:
    """The lines of a streaming response (without the trailing newline)."""
    buf = b""
    for chunk in resp.stream(64 * 1024, decode_content=True):
        buf += chunk
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            yield buf[:i]
            buf = buf[i + 1:]
    if buf:
        yield buf


# --- configuration -------------------------------------------------------------------------


@dataclass
class _Endpoint:
    server: str
    namespace: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    insecure: bool = False
    extra_headers: dict[str, str] = field(default_factory=dict)


def _named(items: Any, key: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in items or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out.setdefault(item["name"], item.get(key) or {})  # first file wins, like kubectl
    return out


def _kubeconfig_files(explicit: str | None) -> list[Path]:
    if explicit is not None:
        return [Path(explicit).expanduser()]
    env = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if env:
        return [p for p in env if p.is_file()]
    default = Path("~/.kube/config").expanduser()
    return [default] if default.is_file() else []


_tmpdir: str | None = None


def _materialise(data: str, name: str) -> str:
    """Client certificates must be files for ssl; keep them private and remove them at exit."""
    global _tmpdir
    if _tmpdir is None:
        _tmpdir = tempfile.mkdtemp(prefix="tidings-")
        atexit.register(shutil.rmtree, _tmpdir, True)
    path = Path(_tmpdir) / name
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return str(path)


def _from_kubeconfig(files: list[Path], context: str | None) -> _Endpoint | None:
    """The endpoint of the chosen context, or None when it needs the kubernetes library's
    loader (exec or auth-provider credentials)."""
    import yaml

    docs: list[tuple[Path, dict[str, Any]]] = []
    for f in files:
        try:
            doc = yaml.safe_load(f.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise CliError(f"invalid input: cannot read kubeconfig {str(f)!r}: "
                           f"{type(err).__name__}", EXIT_INVALID) from None
        if not isinstance(doc, dict):
            raise CliError(f"invalid input: kubeconfig {str(f)!r} is not a mapping",
                           EXIT_INVALID)
        docs.append((f, doc))
    clusters: dict[str, dict[str, Any]] = {}
    users: dict[str, dict[str, Any]] = {}
    contexts: dict[str, dict[str, Any]] = {}
    base: dict[str, Path] = {}  # relative paths resolve against the file that defined them
    current = None
    for f, doc in docs:
        for kind, table in (("clusters", clusters), ("users", users), ("contexts", contexts)):
            for name, value in _named(doc.get(kind), kind[:-1]).items():
                if name not in table:
                    table[name] = value
                    base[f"{kind}/{name}"] = f.parent
        current = current or doc.get("current-context")
    chosen = context or current
    if not chosen:
        raise CliError("no cluster configured: the kubeconfig has no current context "
                       "(use --context)", EXIT_UNREACHABLE)
    if chosen not in contexts:
        raise CliError(f"invalid input: context {chosen!r} is not in the kubeconfig",
                       EXIT_INVALID)
    ctx = contexts[chosen]
    cluster = clusters.get(str(ctx.get("cluster")))
    user = users.get(str(ctx.get("user")), {})
    if not cluster or not cluster.get("server"):
        raise CliError(f"invalid input: context {chosen!r} names no cluster with a server",
                       EXIT_INVALID)
    if user.get("exec") or user.get("auth-provider"):
        return None
    cdir = base[f"clusters/{ctx.get('cluster')}"]
    udir = base.get(f"users/{ctx.get('user')}", cdir)

    def rel(p: Any, d: Path) -> str:
        return str(d / Path(str(p)).expanduser())

    ep = _Endpoint(server=str(cluster["server"]).rstrip("/"),
                   namespace=str(ctx.get("namespace") or "default"),
                   insecure=bool(cluster.get("insecure-skip-tls-verify")))
    if cluster.get("certificate-authority-data"):
        ep.ca_data = base64.b64decode(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        ep.ca_file = rel(cluster["certificate-authority"], cdir)
    if user.get("client-certificate-data"):
        ep.cert_file = _materialise(user["client-certificate-data"], "client.crt")
    elif user.get("client-certificate"):
        ep.cert_file = rel(user["client-certificate"], udir)
    if user.get("client-key-data"):
        ep.key_file = _materialise(user["client-key-data"], "client.key")
    elif user.get("client-key"):
        ep.key_file = rel(user["client-key"], udir)
    if user.get("token"):
        ep.token = str(user["token"])
    elif user.get("tokenFile"):
        try:
            ep.token = Path(rel(user["tokenFile"], udir)).read_text().strip()
        except OSError as err:
            raise CliError(f"invalid input: cannot read tokenFile: {err.strerror}",
                           EXIT_INVALID) from None
    elif user.get("username") and user.get("password"):
        raw = f"{user['username']}:{user['password']}".encode()
        ep.extra_headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
    return ep


def _from_library(path: str | None, context: str | None) -> _Endpoint:
    """exec/auth-provider credentials: let the kubernetes library run the plugin."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    cfg = k8s.Configuration()
    try:
        contexts, active = k8s_config.list_kube_config_contexts(config_file=path)
        chosen = (next((c for c in contexts if c.get("name") == context), None)
                  if context else active)
        k8s_config.load_kube_config(config_file=path, context=context,
                                    client_configuration=cfg, persist_config=False)
    except Exception as err:
        raise CliError(f"invalid input: cannot use the kubeconfig: {err}",
                       EXIT_INVALID) from None
    auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    ep = _Endpoint(server=cfg.host.rstrip("/"),
                   namespace=str(((chosen or {}).get("context") or {}).get("namespace")
                                 or "default"),
                   ca_file=cfg.ssl_ca_cert, cert_file=cfg.cert_file, key_file=cfg.key_file,
                   insecure=not cfg.verify_ssl)
    if auth:
        ep.extra_headers["Authorization"] = auth if " " in auth else f"Bearer {auth}"
    return ep


def _in_cluster() -> _Endpoint:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get(
        "KUBERNETES_SERVICE_PORT", "443")
    sa = Path(_SA_NAMESPACE).parent
    try:
        token = (sa / "token").read_text().strip()
    except OSError as err:
        raise CliError(f"no cluster configured: in-cluster token unreadable: {err.strerror}",
                       EXIT_UNREACHABLE) from None
    ns = "default"
    with contextlib.suppress(OSError):
        ns = (sa / "namespace").read_text().strip() or "default"
    if ":" in host:
        host = f"[{host}]"
    return _Endpoint(server=f"https://{host}:{port}", namespace=ns,
                     ca_file=str(sa / "ca.crt"), token=token)


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
    """Build a client from a kubeconfig (or in-cluster), and pick the namespace the user means:
    -n, else the context's namespace, else 'default'."""
    if namespace is not None:
        check_namespace(namespace)
    if kubeconfig is not None and not Path(kubeconfig).expanduser().is_file():
        raise CliError(f"invalid input: kubeconfig {kubeconfig!r} does not exist", EXIT_INVALID)
    files = _kubeconfig_files(kubeconfig)
    if files:
        ep = _from_kubeconfig(files, context)
        if ep is None:
            ep = _from_library(kubeconfig, context)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context:
            raise CliError("invalid input: --context needs a kubeconfig", EXIT_INVALID)
        ep = _in_cluster()
    else:
        raise CliError("no cluster configured: no kubeconfig found (set KUBECONFIG or "
                       "--kubeconfig; `tidings dev up` starts a local one)", EXIT_UNREACHABLE)
    try:
        if ep.insecure:
            tls = ssl.create_default_context()
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        else:
            tls = ssl.create_default_context(cafile=ep.ca_file, cadata=(
                ep.ca_data.decode() if ep.ca_data else None))
        if ep.cert_file:
            tls.load_cert_chain(ep.cert_file, ep.key_file)
    except (OSError, ssl.SSLError, ValueError) as err:
        raise CliError(f"invalid input: the kubeconfig's TLS files are unusable: {err}",
                       EXIT_INVALID) from None
    headers = {"Accept": "application/json", "Content-Type": "application/json",
               "User-Agent": "tidings-cli", **ep.extra_headers}
    if ep.token:
        headers["Authorization"] = f"Bearer {ep.token}"
    # Fail fast on a dead endpoint: one retry, the connect timeout does the rest. Many
    # connections per host: `logs` runs concurrent streams.
    pool = urllib3.PoolManager(
        num_pools=4, maxsize=64, ssl_context=tls,
        retries=urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0,
                              backoff_factor=0.2, raise_on_status=False))
    return Kube(pool=pool, server=ep.server, headers=headers,
                namespace=namespace or ep.namespace)
