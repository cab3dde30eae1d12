"""Kubernetes access for the CLI, on tidings.kube (kubectl's kubeconfig rules, exec
credentials renewed on expiry and on 401, proxy-url, tls-server-name): the namespace the user
means, the requests the commands make, and API/connection errors translated into the CLI's
one-line errors and exit codes.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson
import urllib3
from urllib3.response import BaseHTTPResponse

from tidings.cli.common import (
    EXIT_ERROR,
    EXIT_FORBIDDEN,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    CliError,
    Connection,
    add_error_translator,
    check_namespace,
    parse_request_timeout,
)
from tidings.kube import Client, ConfigError, Impersonation, KubeError, StatusPredicates
from tidings.kube import connect as connect_client
from tidings.schemas.wire.constants import API_VERSION
from tidings.schemas.wire.contract import (
    EVENTS_RESOURCE,
    TASKFEEDBACK_RESOURCE,
    events_path,
    pods_path,
    taskfeedback_path,
)

if TYPE_CHECKING:  # (a follow's loop and the object types: a one-shot get loads neither)
    from tidings.kube import ListWatch
    from tidings.kube.objects import Event, KubeObject, Pod

# (connect, read) seconds for ordinary requests; streams choose their own read timeout.
REQUEST_TIMEOUT = (5.0, 30.0)

# A follow's backoff between failed watches: a person is waiting, so it starts low and stays
# under 5 s (no jitter: one CLI is not a herd).
FOLLOW_BACKOFF_BASE, FOLLOW_BACKOFF_CAP = 0.4, 5.0

# The TaskFeedback API, for the message when its CRD is not installed.
NO_CRD = f"the server has no TaskFeedback API ({API_VERSION}): install deploy/crd.yaml"


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


class ApiError(StatusPredicates, CliError):
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
    answer = KubeError(status, "")  # what the status means (its predicates)
    if answer.forbidden:
        return ApiError(f"forbidden: cannot {doing}", EXIT_FORBIDDEN, status, action)
    if answer.unauthorized:
        return ApiError("unauthorized: the cluster rejected the credentials of this context",
                        EXIT_FORBIDDEN, status, action)
    if answer.not_found:
        if (action is not None and action.resource == TASKFEEDBACK_RESOURCE
                and no_such_resource(body)):
            return ApiError(NO_CRD, EXIT_NOT_FOUND, status, action)
        what = f"{action.resource} {action.name!r}" if action and action.name else doing
        return ApiError(f"not found: {what}", EXIT_NOT_FOUND, status, action)
    if answer.invalid:
        return ApiError(f"invalid input: {_status_message(status, body, reason)}",
                        EXIT_INVALID, status, action)
    return ApiError(f"API error {status} while trying to {doing}: "
                    f"{_status_message(status, body, reason)}", EXIT_ERROR, status, action)


def no_such_resource(body: bytes | str | None) -> bool:
    """Whether a 404 says the resource type is unknown (no CRD), not that an object is
    missing: the API server names the kind in a missing object's Status details only."""
    try:
        obj = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        return True  # a plain-text "404 page not found": no API at that path at all
    details = obj.get("details") if isinstance(obj, dict) else None
    return not (isinstance(details, dict) and details.get("kind"))


def translate_error(err: BaseException, server: str = "") -> CliError | None:
    """Map a connection-level exception to a CliError; None when it is not one of ours."""
    if isinstance(err, KubeError):
        return _from_kube_error(err, None)
    if isinstance(err, ConfigError):
        return _from_config_error(err)
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


def _from_kube_error(err: KubeError, action: Action | None) -> CliError:
    if err.status:
        return api_error(err.status, err.body, action, err.message)
    if err.reason == "CredentialError":
        return CliError(f"unauthorized: cannot get credentials: {err.message}", EXIT_FORBIDDEN)
    where = err.message.removeprefix("cannot reach ")  # "SERVER: what happened"
    return CliError(f"cannot reach the cluster at {where}", EXIT_UNREACHABLE)


def _from_config_error(err: ConfigError) -> CliError:
    text = str(err)
    if text.startswith("no cluster configured"):
        return CliError(text, EXIT_UNREACHABLE)
    return CliError(f"invalid input: {text}", EXIT_INVALID)


@dataclass
class Kube:
    """The CLI's requests on one tidings.kube Client, plus the namespace the user means."""

    client: Client
    namespace: str
    #: (connect, read) seconds, or total seconds (--request-timeout)
    timeout: tuple[float, float | None] | float = REQUEST_TIMEOUT

    @property
    def server(self) -> str:
        return self.client.server

    def _open(self, path: str, query: Mapping[str, object] | None, action: Action | None,
              timeout: tuple[float, float | None] | float, stream: bool) -> BaseHTTPResponse:
        params = {k: v for k, v in (query or {}).items() if v is not None}
        try:
            return self.client.open("GET", path, query=params, timeout=timeout, stream=stream)
        except KubeError as err:
            raise _from_kube_error(err, action) from None

    def get_json(self, path: str, query: Mapping[str, object] | None = None, *,
                 action: Action | None = None) -> dict[str, Any]:
        resp = self._open(path, query, action, self.timeout, False)
        try:
            obj = orjson.loads(resp.data)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            raise CliError(f"unexpected answer from {path}", EXIT_ERROR)
        return obj

    def list_all(self, path: str, query: Mapping[str, object] | None = None, *,
                 action: Action | None = None) -> tuple[list[KubeObject], str]:
        """Every item of a list (paginated), and the list's resourceVersion."""
        params = {k: v for k, v in (query or {}).items() if v is not None}
        try:
            items, rv = self.client.list_all(path, params, timeout=self.timeout)
        except KubeError as err:
            raise _from_kube_error(err, action) from None
        return cast("list[KubeObject]", items), rv

    def stream(self, path: str, query: Mapping[str, object], *, action: Action | None = None,
               read_timeout: float | None = 60.0) -> BaseHTTPResponse:
        """An open urllib3 response (watch or log stream). Iterate `lines(resp)`. A stream
        is long by design: --request-timeout bounds its connect only."""
        connect_s = self.timeout if isinstance(self.timeout, float) else self.timeout[0]
        return self._open(path, query, action, (connect_s, read_timeout), True)

    def list_watch(self, path: str, query: Mapping[str, object], *, action: Action,
                   resource_version: str | None = None, lists: bool = True,
                   watch_timeout: int = 60, read_timeout: float | None = None) -> ListWatch:
        """tidings.kube's list+watch loop on this client, with the CLI's rule for failures:
        what may pass (no answer, 429, 5xx) is retried after a short backoff; anything else
        (forbidden, unauthorized, ...) ends the command with its one-line error."""
        from tidings.kube import ListWatch
        from tidings.kube.flowcontrol import Backoff

        connect_s = self.timeout if isinstance(self.timeout, float) else self.timeout[0]

        def fail_unless_transient(err: Exception) -> None:
            if isinstance(err, KubeError):
                if err.retryable:
                    return
                raise _from_kube_error(err, action) from None
            raise err

        return ListWatch(
            self.client, path, query, resource_version=resource_version, lists=lists,
            watch_timeout=watch_timeout,
            timeout=(connect_s, read_timeout if read_timeout is not None else watch_timeout + 15),
            list_timeout=self.timeout,
            backoff=Backoff(base=FOLLOW_BACKOFF_BASE, cap=FOLLOW_BACKOFF_CAP, jitter=0.0),
            on_error=fail_unless_transient)

    # -- well-known paths ---------------------------------------------------------------------

    def list_events(self, namespace: str | None, selector: str) -> tuple[list[Event], str]:
        items, rv = self.list_all(events_path(namespace), {"fieldSelector": selector},
                                  action=Action("list", EVENTS_RESOURCE, namespace or ""))
        return cast("list[Event]", items), rv

    def list_pods(self, namespace: str, selector: str) -> tuple[list[Pod], str]:
        """The pods of ``namespace`` with the labels ``selector`` asks for."""
        items, rv = self.list_all(pods_path(namespace), {"labelSelector": selector},
                                  action=Action("list", "pods", namespace))
        return cast("list[Pod]", items), rv

    def watch_events(self, namespace: str, selector: str, resource_version: str | None,
                     *, lists: bool = True, timeout_s: int = 60) -> ListWatch:
        """The bus events of ``namespace`` matching ``selector`` (the CLI's events follow)."""
        return self.list_watch(events_path(namespace), {"fieldSelector": selector},
                               action=Action("watch", EVENTS_RESOURCE, namespace),
                               resource_version=resource_version, lists=lists,
                               watch_timeout=timeout_s)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod, or None when it does not exist."""
        try:
            return cast("Pod", self.get_json(pods_path(namespace, name),
                                           action=Action("get", "pods", namespace, name)))
        except ApiError as err:
            if err.not_found:
                return None
            raise

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def found_elsewhere(kube: Kube, name: str, here: str) -> str:
    """What a "not found" adds when the TaskFeedback ``name`` exists in other namespaces
    (kubectl's commonest slip: the wrong namespace); '' when it does not, or when they may
    not be listed."""
    try:
        crs, _ = kube.list_all(taskfeedback_path(), {"fieldSelector": f"metadata.name={name}"},
                               action=Action("list", TASKFEEDBACK_RESOURCE))
    except ApiError:
        return ""
    spaces = sorted({str((i.get("metadata") or {}).get("namespace") or "") for i in crs}
                    - {"", here})
    if not spaces:
        return ""
    if len(spaces) == 1:
        return f"; it exists in namespace {spaces[0]}: use -n {spaces[0]} (or -A)"
    return f"; it exists in namespaces {', '.join(spaces)}: choose one with -n"


def lines(resp: BaseHTTPResponse) -> Iterator[bytes]:
    """The lines of a streaming response (without the trailing newline)."""
    from tidings.kube import iter_lines

    return iter_lines(resp)


def watch_message(line: bytes) -> tuple[str, KubeObject | None] | None:
    """One watch line as (type, object): None for a line that is not a JSON object; the
    object is None when the message carries none (each follower decides what that means)."""
    try:
        msg = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(msg, dict):
        return None
    obj = msg.get("object")
    return str(msg.get("type") or ""), cast("KubeObject", obj) if isinstance(obj, dict) else None


def client_timeout(value: str | None) -> tuple[float, float | None] | float:
    """--request-timeout as a client timeout: the default, a total, or 0 for no read limit."""
    if value is None:
        return REQUEST_TIMEOUT
    seconds = parse_request_timeout(value)
    return (REQUEST_TIMEOUT[0], None) if seconds == 0 else seconds


def impersonation(as_user: str | None, as_groups: list[str] | None) -> Impersonation | None:
    """kubectl's --as/--as-group as headers the client sends (None: act as the context)."""
    groups = tuple(g for g in as_groups or [] if g)
    if not as_user and not groups:
        return None
    if as_user is not None and not as_user.strip():
        raise CliError("invalid input: --as needs a user name", EXIT_INVALID)
    return Impersonation(user=as_user or "", groups=groups)


def connect(kubeconfig: str | None, context: str | None, namespace: str | None,
            impersonate: Impersonation | None = None, *, request_timeout: str | None = None,
            as_user: str | None = None, as_groups: list[str] | None = None) -> Kube:
    """A client for what kubectl would use with these flags (kubeconfig, else in-cluster), and
    the namespace the user means: -n, else the context's, else 'default'."""
    if namespace is not None:
        check_namespace(namespace)
    timeout = client_timeout(request_timeout)
    impersonate = impersonate or impersonation(as_user, as_groups)
    try:
        # Many connections per host: `logs` runs concurrent streams.
        client = connect_client(kubeconfig, context, namespace=namespace,
                                impersonate=impersonate, maxsize=64, user_agent="tidings-cli")
    except ConfigError as err:
        raise _from_config_error(err) from None
    return Kube(client=client, namespace=client.config.namespace, timeout=timeout)


def connect_with(conn: Connection, namespace: str | None) -> Kube:
    """``connect`` for a command's connection flags."""
    return connect(conn.kubeconfig, conn.context, namespace, request_timeout=conn.request_timeout,
                   as_user=conn.as_user, as_groups=conn.as_group)


# Every command that talks to the cluster imports this module; from then on its errors are
# one line and their exit code (cli/common.py's ``command``).
add_error_translator(translate_error)
