"""Leader election on a coordination.k8s.io/v1 Lease (client-go's algorithm, raw requests).

A standby treats the lease as expired once it has seen no change of the record for
``lease_duration`` on its own clock (no trust in other clocks). Updates use optimistic
concurrency (resourceVersion), so two candidates can never both win one round.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.schemas.wire.contract import lease_path
from tidings.schemas.wire.times import format_time

log = logging.getLogger("tidings.watcher.leader")


def default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(self, kube: Client, namespace: str, name: str = "tidings-watcher", *,
                 identity: str | None = None, lease_duration: float = 15.0,
                 renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry period < renew deadline < lease duration")
        self.kube, self.namespace, self.name = kube, namespace, name
        self.identity = identity or default_identity()
        self.lease_duration, self.renew_deadline = lease_duration, renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = float("-inf")
        self._leader = False
        self.term = 0  # bumped each time we become leader: fences work of an older term
        #: Why the last round did not renew, for the log line when the lease is lost.
        self.last_failure = ""

    @property
    def path(self) -> str:
        return lease_path(self.namespace, self.name)

    def is_leader(self, term: int | None = None) -> bool:
        """True while our last successful renewal is younger than the renew deadline (and,
        with ``term``, only within that term: a later term does not revive older work)."""
        return self._leader and self.clock() - self._last_renew < self.renew_deadline \
            and (term is None or term == self.term)

    # --- one round ----------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        now_s = format_time(datetime.now(UTC))
        try:
            lease = self.kube.request("GET", self.path, timeout=(3, 5))
        except KubeError as e:
            if not e.not_found:
                log.debug("lease get failed: %s", e)
                return self._failed("get", e)
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity,
                             "leaseDurationSeconds": max(1, round(self.lease_duration)),
                             "acquireTime": now_s, "renewTime": now_s, "leaseTransitions": 0}}
            try:
                self.kube.request("POST", lease_path(self.namespace), body=body, timeout=(3, 5))
            except KubeError as e:
                return self._failed("create", e)
            return self._won()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"),
                  spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and \
                self.clock() - self._observed_at < float(duration):
            # Held by someone else and not expired (on our clock).
            self.last_failure = f"held by {holder}"
            return False
        new = dict(spec)
        new.update(holderIdentity=self.identity, renewTime=now_s,
                   leaseDurationSeconds=max(1, round(self.lease_duration)))
        if holder != self.identity:
            new["acquireTime"] = now_s
            new["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = new
        try:
            self.kube.request("PUT", self.path, body=lease, timeout=(3, 5))
        except KubeError as e:
            log.debug("lease update failed: %s", e)
            return self._failed("update", e)
        return self._won()

    def _failed(self, verb: str, err: KubeError) -> bool:
        hint = {401: " (the API server no longer accepts the watcher's credentials: was its "
                     "ServiceAccount or token deleted?)",
                403: f" (may the watcher still {verb} leases in {self.namespace}? its Role "
                     "or RoleBinding)"}.get(err.status, "")
        self.last_failure = f"{verb} failed: {err}{hint}"
        return False

    def _won(self) -> bool:
        self._last_renew = self.clock()
        self.last_failure = ""
        if not self._leader:
            self.term += 1
            log.info("became leader as %s (term %d)", self.identity, self.term)
        self._leader = True
        return True

    # --- loops --------------------------------------------------------------------------
    def acquire(self, stop: threading.Event) -> bool:
        """Block until we lead (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                return True
            stop.wait(self.retry_period)
        return False

    def hold(self, stop: threading.Event) -> None:
        """Renew every retry period; return when the lease is lost (or ``stop`` is set)."""
        while not stop.wait(self.retry_period):
            if self.try_acquire_or_renew():
                continue
            if self.clock() - self._last_renew >= self.renew_deadline:
                self._leader = False
                log.error("lost the lease %s/%s: %s", self.namespace, self.name,
                          self.last_failure or "not renewed in time")
                return

    def release(self) -> None:
        """Give the lease up at once (graceful shutdown), so a standby need not wait it out."""
        if not self._leader:
            return
        self._leader = False
        try:
            lease = self.kube.request("GET", self.path, timeout=(3, 5))
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(holderIdentity="", leaseDurationSeconds=1,
                        renewTime=format_time(datetime.now(UTC)))
            lease["spec"] = spec
            self.kube.request("PUT", self.path, body=lease, timeout=(3, 5))
            log.info("released the lease")
        except KubeError as e:
            log.warning("lease release failed: %s", e)
