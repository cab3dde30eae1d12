"""Kubernetes access for the CLI: kubeconfig and context, raw JSON requests and streams, and
API/connection errors translated into the CLI's one-line errors and exit codes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

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
    if isinstance(err, ApiException):
        if not err.status:  # the client reports TLS failures as status 0
            at = f" at {server}" if server else ""
            return CliError(f"cannot reach the cluster{at}: {err.reason}", EXIT_UNREACHABLE)
        return api_error(int(err.status), err.body, None, str(err.reason or ""))
    if isinstance(err, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
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
    """One API client plus the namespace the user means."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str
    server: str
    _closed: bool = field(default=False, repr=False)

    # -- plain requests ---------------------------------------------------------------------

    def _call(self, method: str, path: str, query: dict[str, Any] | None, action: Action | None,
              timeout: Any, body: Any = None) -> Any:
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            method, url, headers, data, _ = self.api.param_serialize(
                method, path, query_params=params,
                header_params={"Accept": "application/json",
                               "Content-Type": "application/json"},
                body=body, auth_settings=["BearerToken"])
            r = self.api.call_api(method, url, header_params=headers, body=data,
                                  _request_timeout=timeout)
        except Exception as err:
            mapped = translate_error(err, self.server)
            if mapped is None:
                raise
            raise mapped from None
        resp = r.response  # urllib3, not preloaded: streams stay streams
        if not 200 <= r.status <= 299:
            try:
                payload = resp.data
            except Exception:
                payload = b""
            finally:
                resp.release_conn()
            raise api_error(r.status, payload, action, str(r.reason or ""))
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
                self.api.close()


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


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
    """Build a client from a kubeconfig (or in-cluster), and pick the namespace the user means:
    -n, else the context's namespace, else 'default'."""
    if namespace is not None:
        check_namespace(namespace)
    path = kubeconfig
    if path is not None and not os.path.isfile(os.path.expanduser(path)):
        raise CliError(f"invalid input: kubeconfig {path!r} does not exist", EXIT_INVALID)
    env_paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    default = os.path.expanduser("~/.kube/config")
    have_file = path is not None or any(os.path.isfile(p) for p in env_paths) or \
        os.path.isfile(default)
    configuration = k8s.Configuration()
    ctx_namespace = "default"
    if not have_file and os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context:
            raise CliError("invalid input: --context needs a kubeconfig", EXIT_INVALID)
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as err:
            raise CliError(f"no cluster configured: {err}", EXIT_UNREACHABLE) from None
        try:
            with open(_SA_NAMESPACE) as f:
                ctx_namespace = f.read().strip() or "default"
        except OSError:
            pass
    elif not have_file:
        raise CliError("no cluster configured: no kubeconfig found (set KUBECONFIG or "
                       "--kubeconfig; `tidings dev up` starts a local one)", EXIT_UNREACHABLE)
    else:
        try:
            contexts, active = k8s_config.list_kube_config_contexts(config_file=path)
        except (ConfigException, OSError, ValueError) as err:
            raise CliError(f"invalid input: cannot read the kubeconfig: {err}",
                           EXIT_INVALID) from None
        chosen = active
        if context is not None:
            chosen = next((c for c in contexts or [] if c.get("name") == context), None)
            if chosen is None:
                raise CliError(f"invalid input: context {context!r} is not in the kubeconfig",
                               EXIT_INVALID)
        if not chosen:
            raise CliError("no cluster configured: the kubeconfig has no current context "
                           "(use --context)", EXIT_UNREACHABLE)
        ctx_namespace = (chosen.get("context") or {}).get("namespace") or "default"
        try:
            k8s_config.load_kube_config(config_file=path, context=chosen.get("name"),
                                        client_configuration=configuration,
                                        persist_config=False)
        except (ConfigException, OSError, ValueError) as err:
            raise CliError(f"invalid input: cannot use the kubeconfig: {err}",
                           EXIT_INVALID) from None
    # Fail fast on a dead endpoint: a single retry, the connect timeout does the rest.
    configuration.retries = urllib3.Retry(total=1, connect=1, read=0, redirect=2,
                                          backoff_factor=0.2, raise_on_status=False)
    configuration.connection_pool_maxsize = 64  # `logs` runs many concurrent streams
    api = k8s.ApiClient(configuration)
    return Kube(api=api, namespace=namespace or ctx_namespace, server=configuration.host)
