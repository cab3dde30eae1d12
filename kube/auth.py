"""Credentials for the Kubernetes client layer: each source hands out one cached
``Authorization`` value, cheap to read on every request, and knows how to renew it.

Sources: a fixed value (token, basic auth), a token file re-read when it changes (in-cluster
projected tokens, kubeconfig ``tokenFile``), and exec credential plugins (client-go's
``client.authentication.k8s.io`` protocol), re-run when their ``expirationTimestamp`` passes
and when the API server answers 401 to the credentials they gave.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from tidings._compat import UTC, fromisoformat

from .errors import ConfigError

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class CredentialError(ConfigError):
    """Credentials could not be obtained (a token file vanished, a plugin failed)."""


class Auth(Protocol):
    #: Bumped whenever the client certificate below changes (the TLS pool is rebuilt then).
    cert_generation: int
    #: (certificate PEM, key PEM) handed out by a plugin, or None.
    cert: tuple[bytes, bytes] | None

    def header(self) -> str | None:
        """The ``Authorization`` value for the next request (None: send none)."""
        ...

    def refresh(self, used: str | None) -> bool:
        """The server answered 401 to ``used``: renew, and say whether the credentials
        changed (only then is the request worth sending again)."""
        ...


class NoAuth:
    """A fixed value (a token, basic auth, or nothing: client certificates do the work)."""

    cert_generation = 0
    cert: tuple[bytes, bytes] | None = None

    def __init__(self, value: str | None = None) -> None:
        self.value = value

    def header(self) -> str | None:
        return self.value

    def refresh(self, used: str | None) -> bool:
        return False


def bearer(token: str) -> str:
    return f"Bearer {token}"


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


class TokenFileAuth:
    """A bearer token read from a file and re-read when the file changes (the kubelet swaps
    a pod's projected token before it expires; client-go re-reads it once a minute, this
    looks at the file's identity at most once per ``check_s``), and on a 401."""

    cert_generation = 0
    cert: tuple[bytes, bytes] | None = None

    def __init__(self, path: str, check_s: float = 1.0) -> None:
        self.path = path
        self.check_s = check_s
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._value: str | None = None
        self._next_check = 0.0
        self._load(force=True)

    def _load(self, force: bool = False) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if force or stamp != self._stamp:
                with open(self.path, encoding="utf-8") as f:
                    token = f.read().strip()
                if token:  # a half-written file: keep the old token, look again soon
                    self._value, self._stamp = bearer(token), stamp
        except OSError as e:
            if self._value is None:
                raise CredentialError(f"cannot read token file {self.path}: "
                                      f"{e.strerror or e}") from None
        self._next_check = time.monotonic() + self.check_s

    def header(self) -> str | None:
        if time.monotonic() >= self._next_check:
            with self._lock:
                if time.monotonic() >= self._next_check:
                    self._load()
        return self._value

    def refresh(self, used: str | None) -> bool:
        with self._lock:
            self._load(force=True)
            return self._value != used


@dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig ``users[].user.exec`` stanza (paths already resolved)."""

    command: str
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    install_hint: str = ""
    provide_cluster_info: bool = False
    interactive_mode: str = "IfAvailable"  # Never | IfAvailable | Always
    cluster_info: Mapping[str, Any] = field(default_factory=dict)


class ExecAuth:
    """Runs an exec credential plugin the way client-go does: ``KUBERNETES_EXEC_INFO`` in its
    environment, stdin only when interactive, stderr to ours; the result is cached until its
    ``expirationTimestamp`` and renewed on a 401 unless another thread already renewed it."""

    def __init__(self, config: ExecConfig, timeout_s: float = 120.0) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.cert_generation = 0
        self.cert: tuple[bytes, bytes] | None = None
        self._lock = threading.Lock()
        self._value: str | None = None
        self._have = False
        self._expires = float("inf")  # epoch seconds; inf = never
        self.runs = 0  # how often the plugin ran (tests and diagnostics)

    def header(self) -> str | None:
        if self._have and time.time() < self._expires:
            return self._value
        with self._lock:
            if not self._have or time.time() >= self._expires:
                self._run()
            return self._value

    def refresh(self, used: str | None) -> bool:
        with self._lock:
            if self._value != used:  # rotated meanwhile by another request
                return True
            old = (self._value, self.cert)
            self._run()
            return (self._value, self.cert) != old

    def _interactive(self) -> bool:
        mode = self.config.interactive_mode or "IfAvailable"
        tty = sys.stdin is not None and sys.stdin.isatty()
        if mode == "Always" and not tty:
            raise CredentialError(f"exec plugin {self.config.command} needs an interactive "
                                  "terminal (interactiveMode: Always) and stdin is not one")
        return tty and mode != "Never"

    def _run(self) -> None:
        cfg = self.config
        interactive = self._interactive()
        spec: dict[str, Any] = {"interactive": interactive}
        if cfg.provide_cluster_info:
            spec["cluster"] = dict(cfg.cluster_info)
        info = {"apiVersion": cfg.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **dict(cfg.env), "KUBERNETES_EXEC_INFO": orjson.dumps(info).decode()}
        self.runs += 1
        try:
            proc = subprocess.run(
                [cfg.command, *cfg.args], env=env, stdout=subprocess.PIPE,
                stdin=None if interactive else subprocess.DEVNULL,
                timeout=None if interactive else self.timeout_s, check=False)
        except FileNotFoundError:
            hint = f" ({cfg.install_hint.strip()})" if cfg.install_hint.strip() else ""
            raise CredentialError(f"exec plugin {cfg.command} not found{hint}") from None
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CredentialError(f"exec plugin {cfg.command} failed: {e}") from None
        if proc.returncode != 0:
            raise CredentialError(f"exec plugin {cfg.command} failed with exit code "
                                  f"{proc.returncode}")
        self._accept(proc.stdout)

    def _accept(self, out: bytes) -> None:
        cmd = self.config.command
        try:
            cred = orjson.loads(out)
        except orjson.JSONDecodeError:
            raise CredentialError(f"exec plugin {cmd} printed no ExecCredential JSON") from None
        if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
            raise CredentialError(f"exec plugin {cmd} printed no ExecCredential")
        if cred.get("apiVersion") != self.config.api_version:
            raise CredentialError(f"exec plugin {cmd} is configured for "
                                  f"{self.config.api_version} and returned "
                                  f"{cred.get('apiVersion')}")
        status = cred.get("status")
        if not isinstance(status, dict):
            raise CredentialError(f"exec plugin {cmd} returned no status")
        token = str(status.get("token") or "")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not token and not cert and not key:
            raise CredentialError(f"exec plugin {cmd} returned neither a token nor a "
                                  "certificate and key")
        if bool(cert) != bool(key):
            raise CredentialError(f"exec plugin {cmd} returned only one of certificate "
                                  "and key")
        expires = float("inf")
        if status.get("expirationTimestamp"):
            expires = _rfc3339(str(status["expirationTimestamp"]), cmd)
        new_cert = (str(cert).encode(), str(key).encode()) if cert else None
        if new_cert != self.cert:
            self.cert = new_cert
            self.cert_generation += 1
        self._value = bearer(token) if token else None
        self._expires = expires
        self._have = True


def _rfc3339(text: str, cmd: str) -> float:
    """Epoch seconds of an RFC 3339 time, read by the project's one reader
    (``tidings._compat.fromisoformat``: "Z", "t" or " " between date and time, any number of
    fraction digits); without a zone it is UTC. A lowercase "z" is refused, as client-go's
    parser refuses it."""
    try:
        when = fromisoformat(text.strip())
    except ValueError:
        raise CredentialError(f"exec plugin {cmd} returned a bad expirationTimestamp "
                              f"{text!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True, slots=True)
class BoundPod:
    """The pod a service-account token is bound to, as its claims name it."""

    namespace: str
    name: str
    uid: str


def bound_pod(header: str | None) -> BoundPod | None:
    """The pod a bearer ``Authorization`` value's token is bound to, read from its JWT claims
    (``kubernetes.io: {namespace, pod: {name, uid}}``, what a projected or TokenRequest token
    carries), or None: not a JWT, or a token bound to no pod (a person's, a legacy secret's).

    Not verified: it is our own credential, read only to learn who we are; the API server
    checks the token on every request, and the admission policy the identity we claim."""
    if not header or not header.startswith("Bearer "):
        return None
    parts = header[len("Bearer "):].strip().split(".")
    if len(parts) != 3 or len(parts[1]) > 16384:
        return None
    try:
        payload = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = orjson.loads(base64.urlsafe_b64decode(payload))
        k8s = claims["kubernetes.io"]
        pod, namespace = k8s["pod"], k8s["namespace"]
        name, uid = pod["name"], pod["uid"]
    except Exception:  # not a JWT, or no pod claim: bound to no pod
        return None
    if not all(isinstance(v, str) and v for v in (namespace, name, uid)):
        return None
    return BoundPod(namespace, name, uid)
