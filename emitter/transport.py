"""Where events go: the kube-apiserver (one raw POST per event, through tidings.kube), or a
local log sink.

The POST sends the event dict as orjson bytes and never deserialises a model; the client's
auth header is cached and its connection pool kept, so an event costs one small request.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Protocol

import orjson

from tidings.kube import JSON, BoundPod, Client, ConfigError, KubeError, bound_pod, connect
from tidings.schemas.wire.contract import events_path

log = logging.getLogger("tidings.emitter")

EVENTS_PATH = events_path("{namespace}")  # a str.format template
FIELD_MANAGER = "tidings-emitter"
# One sender thread posts at a time; a second connection covers a create racing a renewal.
POOL_SIZE = 2
# Every create names the emitter's field manager (managedFields show it); encoded once.
_CREATE_PATH = EVENTS_PATH + f"?fieldManager={FIELD_MANAGER}"


class Transport(Protocol):
    #: True for the no-cluster sink: nothing leaves the process.
    sink: bool

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        """Create the event. True = created, False = it already existed (409: delivered before).
        Raises KubeError (``retryable`` says whether to try again) otherwise."""
        ...


class LogSink:
    """No cluster configured (local development): events are logged at DEBUG and counted."""

    sink = True

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        log.debug("tidings (no cluster) %s/%s %s %s", namespace, body["metadata"]["name"],
                  body["reason"], body["note"])
        return True


class KubeTransport:
    """Creates events through a tidings.kube Client (its auth renewal, TLS and pool)."""

    sink = False

    def __init__(self, client: Client, timeout: tuple[float, float] = (3.0, 10.0), *,
                 pod_bound: bool | None = None) -> None:
        self.client = client
        self.timeout = timeout
        # The pod its token is bound to (the token's claims; None: bound to no pod): who we
        # are when the environment does not say, and whether events may carry the proof.
        self.bound_pod = token_pod(client)
        # Whether events carry the sender proof (see build_event); None: when the token is
        # bound to the pod the events speak for (the sender decides, knowing its identity).
        self.pod_bound = pod_bound
        self.server = client.server
        self._paths: dict[str, str] = {}

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        path = self._paths.get(namespace)
        if path is None:
            path = self._paths[namespace] = _CREATE_PATH.format(namespace=namespace)
        try:
            self.client.open("POST", path, data=orjson.dumps(body), content_type=JSON,
                             timeout=self.timeout)
        except KubeError as e:
            if e.already_exists:
                return False
            raise
        return True


def no_cluster_configured(env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """True when neither in-cluster config nor a kubeconfig is there (local development)."""
    env = os.environ if env is None else env
    if env.get("KUBERNETES_SERVICE_HOST"):
        return False
    paths = env.get("KUBECONFIG")
    if paths:
        return not any(Path(p).expanduser().is_file() for p in paths.split(os.pathsep) if p)
    return not Path("~/.kube/config").expanduser().is_file()


def sender_proof_setting() -> bool | None:
    """``TIDINGS_SENDER_PROOF=0`` turns the sender proof off; otherwise (None) the token's
    claims decide: events carry it when the token is bound to the pod they speak for,
    whether it comes from the in-cluster mount or a kubeconfig, and never from a token bound
    to no pod (the admission policy would refuse it)."""
    return False if os.environ.get("TIDINGS_SENDER_PROOF", "") == "0" else None


def token_pod(client: Client) -> BoundPod | None:
    """The pod ``client``'s bearer token is bound to, or None. Never raises (a credential
    that cannot be read now fails the first request instead, with its own error)."""
    try:
        return bound_pod(client.config.auth.header())
    except Exception:
        return None


def default_transport() -> Transport:
    """The cluster if one is configured, else the log sink. Never raises."""
    if no_cluster_configured():
        return LogSink()
    try:
        return KubeTransport(connect(maxsize=POOL_SIZE, user_agent=FIELD_MANAGER),
                             pod_bound=sender_proof_setting())
    except (ConfigError, OSError) as e:  # a broken kubeconfig must not crash the workload
        log.warning("tidings: cannot load cluster config (%s); events are only logged", e)
        return LogSink()
