"""Where events go: the kube-apiserver (one raw POST per event), or a local log sink.

The POST sends the event dict as JSON and never deserialises a model, so an event costs
one small request and no client-side validation beyond the schemas'.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Protocol

import orjson

from .retry import SendError, parse_retry_after

log = logging.getLogger("tidings.emitter")

EVENTS_PATH = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
# Who wrote the event, in its managedFields (the watcher writes as tidings-watcher).
FIELD_MANAGER = [("fieldManager", "tidings-emitter")]


class Transport(Protocol):
    #: True for the no-cluster sink: nothing leaves the process.
    sink: bool

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        """Create the event. True = created, False = it already existed (409: delivered before).
        Raises SendError otherwise."""
        ...


class LogSink:
    """No cluster configured (local development): events are logged at DEBUG and counted."""

    sink = True

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        log.debug("tidings (no cluster) %s/%s %s %s", namespace, body["metadata"]["name"],
                  body["reason"], body["note"])
        return True


class KubeTransport:
    """Creates events through a kubernetes ``ApiClient`` (its auth, TLS and token refresh)."""

    sink = False

    def __init__(self, api_client: Any, timeout: tuple[float, float] = (3.0, 10.0), *,
                 pod_bound: bool = False) -> None:
        self.api = api_client
        self.timeout = timeout
        # Its token is bound to this pod: events carry the sender proof (see build_event).
        self.pod_bound = pod_bound
        self.server = str(getattr(api_client.configuration, "host", ""))

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            status, headers, data = self._request(namespace, body)
        except ApiException as e:  # raised for non-2xx and for TLS errors (status 0)
            status, headers, data = int(e.status or 0), e.headers or {}, e.body or e.reason
        except (urllib3.exceptions.HTTPError, OSError) as e:
            # Connection refused, reset, timeout: the server may be restarting.
            raise SendError(0, _connection_reason(e, self.server)) from None
        if 200 <= status <= 299:
            return True
        reason, message = _status_reason(data)
        if status == 409 and reason == "AlreadyExists":
            return False
        retry_after = parse_retry_after(_header(headers, "Retry-After"))
        raise SendError(status, f"{reason or 'error'}: {message}".strip(": "), retry_after)

    def _request(self, namespace: str, body: dict[str, Any]) -> tuple[int, Any, Any]:
        api = self.api
        hdrs = {"Accept": "application/json", "Content-Type": "application/json"}
        if hasattr(api, "param_serialize"):  # kubernetes >= 35 (openapi-generator v7 client)
            method, url, headers, data, post = api.param_serialize(
                method="POST", resource_path=EVENTS_PATH, path_params={"namespace": namespace},
                query_params=FIELD_MANAGER, header_params=hdrs, body=body,
                auth_settings=["BearerToken"])
            resp = api.call_api(method, url, headers, data, post, _request_timeout=self.timeout)
            resp.read()
            return int(resp.status), resp.headers, resp.data
        resp = api.call_api(  # the legacy client: the same request, raw response
            EVENTS_PATH, "POST", {"namespace": namespace}, FIELD_MANAGER, hdrs, body=body,
            auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=self.timeout, _return_http_data_only=True)
        return int(resp.status), resp.headers, resp.data


def _header(headers: Any, name: str) -> str | None:
    if not headers:
        return None
    try:
        value = headers.get(name)
    except AttributeError:
        return None
    return str(value) if value is not None else None


def _status_reason(data: Any) -> tuple[str, str]:
    """(reason, message) from a metav1.Status body; tolerant of anything else."""
    try:
        status = orjson.loads(data)
        return str(status.get("reason", "")), str(status.get("message", ""))[:300]
    except Exception:
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")
        return "", text.strip()[:300]


def _connection_reason(e: BaseException, server: str) -> str:
    inner = getattr(e, "reason", None) or e
    text = str(inner)
    if "refused" in text.lower():
        text = "connection refused"
    elif "timed out" in text.lower():
        text = "timed out"
    return f"cannot reach {server}: {text[:200]}"


def no_cluster_configured(env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """True when neither in-cluster config nor a kubeconfig is there (local development)."""
    env = os.environ if env is None else env
    if env.get("KUBERNETES_SERVICE_HOST"):
        return False
    paths = env.get("KUBECONFIG")
    if paths:
        return not any(Path(p).expanduser().is_file() for p in paths.split(os.pathsep) if p)
    return not Path("~/.kube/config").expanduser().is_file()


def pod_bound_credentials(kubeconfig: str | None = None, context: str | None = None) -> bool:
    """Whether the client authenticates with this pod's bound token, so the events may carry
    the sender proof: in-cluster config (every mounted token is pod-bound), unless
    ``TIDINGS_SENDER_PROOF`` says otherwise (1: a kubeconfig holding a pod-bound token; 0:
    never). A proof from any other caller is refused by the admission policy."""
    forced = os.environ.get("TIDINGS_SENDER_PROOF", "")
    if forced in ("0", "1"):
        return forced == "1"
    return kubeconfig is None and context is None and bool(
        os.environ.get("KUBERNETES_SERVICE_HOST"))


def kubeconfig_path(explicit: str | None = None) -> str:
    """The kubeconfig to read: ``explicit``, else $KUBECONFIG (as set now: the client library
    reads it only once, at import), else ~/.kube/config."""
    return explicit or os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from in-cluster config (token re-read as it rotates) or a kubeconfig.

    Raises kubernetes.config.ConfigException (or OSError) when neither can be loaded.
    """
    from kubernetes import client, config

    conf = client.Configuration()
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        # try_refresh_token re-reads the projected token file (kubelet rotates it) each minute.
        config.load_incluster_config(client_configuration=conf, try_refresh_token=True)
    else:
        # persist_config=False: never write refreshed credentials back into the user's file.
        config.load_kube_config(config_file=kubeconfig_path(kubeconfig), context=context,
                                client_configuration=conf, persist_config=False)
    # tenacity owns retries; urllib3's own would multiply them and hide Retry-After.
    conf.retries = 0
    return client.ApiClient(conf)


def kubeconfig_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's (current) context, or ""."""
    try:
        from kubernetes import config

        contexts, current = config.list_kube_config_contexts(
            config_file=kubeconfig_path(kubeconfig))
        ctx = next((c for c in contexts if c["name"] == context), current) if context else current
        return str((ctx or {}).get("context", {}).get("namespace", "") or "")
    except Exception:
        return ""


def default_transport() -> Transport:
    """The cluster if one is configured, else the log sink. Never raises."""
    if no_cluster_configured():
        return LogSink()
    try:
        return KubeTransport(load_api_client(), pod_bound=pod_bound_credentials())
    except Exception as e:  # a broken kubeconfig must not crash the workload
        log.warning("tidings: cannot load cluster config (%s); events are only logged", e)
        return LogSink()
