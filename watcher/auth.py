"""Who may read ``/tasks/<ns>/<name>``: delegated to the API server, as kube-rbac-proxy does.

The bearer token is authenticated with a TokenReview (authentication.k8s.io/v1); the user it
names is authorised with a SubjectAccessReview (authorization.k8s.io/v1) for ``get`` on
``taskfeedbacks.tidings.dev`` of that name in that namespace, so the read API grants exactly
what RBAC grants on the object itself. Decisions are cached briefly (TTL, bounded size, keyed
by a digest of the token, never the token itself); failures to ask are never cached.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache

from tidings.kube import Client, KubeError
from tidings.schemas.wire.constants import API_GROUP, PLURAL
from tidings.schemas.wire.contract import ACCESS_REVIEWS_PATH, TOKEN_REVIEWS_PATH

log = logging.getLogger("tidings.watcher.auth")

MAX_TOKEN_BYTES = 16384  # far above any real JWT; longer ones are refused unasked
REVIEW_TIMEOUT = (3.0, 5.0)


@dataclass(frozen=True)
class Decision:
    code: int  # 200 allowed, 401 unauthenticated, 403 forbidden, 503 could not ask
    reason: str  # "allowed", "no_token", "bad_token", "forbidden", "review_error"
    message: str = ""


ALLOWED = Decision(200, "allowed")
REASONS = ("no_token", "bad_token", "forbidden", "review_error")


class Authorizer:
    """``check(authorization_header, namespace, name)`` -> Decision. Thread-safe."""

    def __init__(self, kube: Client, *, ttl: float = 10.0, max_entries: int = 4096) -> None:
        self.kube = kube
        self._lock = threading.Lock()
        # token digest -> user info (None: the API server said the token is not valid)
        self._users: TTLCache[str, dict[str, Any] | None] = TTLCache(max_entries, ttl)
        # (token digest, namespace, name) -> allowed
        self._access: TTLCache[tuple[str, str, str], bool] = TTLCache(max_entries, ttl)

    def check(self, header: str | None, namespace: str, name: str) -> Decision:
        token = bearer(header)
        if not token:
            return Decision(401, "no_token", "a bearer token is required")
        if len(token) > MAX_TOKEN_BYTES:
            return Decision(401, "bad_token", "token rejected")
        key = hashlib.sha256(token.encode()).hexdigest()
        try:
            user = self._user(key, token)
            if user is None:
                return Decision(401, "bad_token", "token rejected")
            if not self._allowed(key, user, namespace, name):
                return Decision(403, "forbidden", f"{user.get('username', '?')} cannot get "
                                f"{PLURAL}.{API_GROUP} {name!r} in namespace {namespace!r}")
        except KubeError as e:
            log.warning("cannot review a /tasks request: %s", e)
            return Decision(503, "review_error", "cannot verify credentials right now")
        return ALLOWED

    def _user(self, key: str, token: str) -> dict[str, Any] | None:
        with self._lock:
            if key in self._users:
                return self._users[key]
        review = self.kube.request("POST", TOKEN_REVIEWS_PATH, timeout=REVIEW_TIMEOUT, body={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}})
        status = (review or {}).get("status") or {}
        user = status.get("user") if status.get("authenticated") is True else None
        with self._lock:
            self._users[key] = user or None
        return user or None

    def _allowed(self, key: str, user: dict[str, Any], namespace: str, name: str) -> bool:
        ck = (key, namespace, name)
        with self._lock:
            if ck in self._access:
                return self._access[ck]
        spec: dict[str, Any] = {
            "resourceAttributes": {"namespace": namespace, "verb": "get", "group": API_GROUP,
                                   "resource": PLURAL, "name": name},
            "user": user.get("username", ""), "groups": user.get("groups") or []}
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        review = self.kube.request("POST", ACCESS_REVIEWS_PATH, timeout=REVIEW_TIMEOUT, body={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec})
        allowed = ((review or {}).get("status") or {}).get("allowed") is True
        with self._lock:
            self._access[ck] = allowed
        return allowed


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header ("" when there is none)."""
    scheme, _, token = (header or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
