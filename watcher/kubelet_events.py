"""Why a pod is stuck being created, in the kubelet's words: a pod whose containers wait in
ContainerCreating (or PodInitializing) says nothing more in its own object; the reason
(FailedMount, FailedAttachVolume, FailedCreatePodSandBox, ...) lives only in the Events the
kubelet and the attach controller record about it. Those are read for that pod alone, once
it has been creating for ``grace`` seconds, by one list with a field selector on its uid: a
bounded lookup, never a cluster-wide Event watch. An answer is kept ``ttl`` seconds; a lookup
that finds nothing (an image still being pulled also shows as ContainerCreating) waits twice
as long each time before the next, up to ``MAX_WAIT``, so a pod that creates for a minute
costs about four lookups and one a minute after that, while a mount that fails at once is
named within the grace and one round trip.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from datetime import datetime
from typing import Any, Final

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.schemas.engine.observed import WAITING, PodVerdict, clean_message, clean_reason
from tidings.schemas.wire.contract import events_path
from tidings.schemas.wire.times import parse_time

log = logging.getLogger("tidings.watcher.kubelet_events")

# The Warning reasons that explain a pod stuck in creation (the kubelet's and the attach-detach
# controller's, k8s.io/kubernetes pkg/kubelet/events/event.go and the volume manager).
STUCK_REASONS: Final = frozenset({
    "FailedMount", "FailedAttachVolume", "FailedMapVolume", "FailedCreatePodSandBox",
    "FailedCreatePodContainer", "FailedPodSandBoxStatus", "NetworkNotReady",
    "FailedScheduling"})
MAX_PODS: Final = 10_000  # lookups remembered (beyond: the oldest forgotten)
FIRST_WAIT: Final = 5.0  # after a first lookup that found nothing (then doubled)
MAX_WAIT: Final = 60.0  # the longest wait between two lookups that found nothing


def creating_since(obj: object) -> datetime | None:
    """When a pod that is scheduled but not started began being created (its PodScheduled
    condition's time): it has no container running or ended, and every container it shows
    waits in ContainerCreating or PodInitializing. None for any other pod."""
    status = obj.get("status") if isinstance(obj, dict) else None
    if not isinstance(status, dict) or status.get("phase") != "Pending":
        return None
    scheduled = next((c for c in status.get("conditions") or () if isinstance(c, dict)
                      and c.get("type") == "PodScheduled"), None)
    if scheduled is None or scheduled.get("status") != "True":
        return None
    for c in [*(status.get("initContainerStatuses") or ()),
              *(status.get("containerStatuses") or ())]:
        state = c.get("state") if isinstance(c, dict) else None
        waiting = state.get("waiting") if isinstance(state, dict) else None
        if not isinstance(waiting, dict) or waiting.get("reason") not in (
                "ContainerCreating", "PodInitializing"):
            return None
    return parse_time(scheduled.get("lastTransitionTime")) or datetime.now(UTC)


class KubeletEvents:
    """The lookup: ``why`` a pod is stuck, from its newest explaining Warning Event."""

    def __init__(self, kube: Client | None, *, grace: float = 3.0, ttl: float = 10.0) -> None:
        self.kube, self.grace, self.ttl = kube, grace, ttl
        self._lock = threading.Lock()
        # uid -> (next lookup at, the answer, the wait after this answer when it was none)
        self._cache: OrderedDict[str, tuple[float, PodVerdict | None, float]] = OrderedDict()
        self.lookups = 0  # API calls made (the bench counts them)

    def why(self, namespace: str, pod: str, uid: str, since: datetime) -> PodVerdict | None:
        """The waiting verdict of a pod creating since ``since``, once past the grace; None
        before, or when no Event explains it."""
        if self.kube is None or (datetime.now(UTC) - since).total_seconds() < self.grace:
            return None
        with self._lock:
            hit = self._cache.get(uid)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
        verdict = self._look(namespace, pod, uid)
        with self._lock:
            missed = hit[2] * 2 if hit is not None and hit[1] is None else FIRST_WAIT
            wait = self.ttl if verdict is not None else min(MAX_WAIT, missed)
            self._cache[uid] = (time.monotonic() + wait, verdict, wait)
            self._cache.move_to_end(uid)
            while len(self._cache) > MAX_PODS:
                self._cache.popitem(last=False)
        return verdict

    def _look(self, namespace: str, pod: str, uid: str) -> PodVerdict | None:
        assert self.kube is not None
        self.lookups += 1
        try:
            got: Any = self.kube.request("GET", events_path(namespace), query=[
                ("fieldSelector", f"regarding.uid={uid},type=Warning"), ("limit", "50")],
                timeout=(3, 10))
        except KubeError as e:
            log.debug("cannot read the events of pod %s/%s: %s", namespace, pod, e)
            return None
        best: tuple[datetime, dict[str, Any]] | None = None
        for ev in (got or {}).get("items") or ():
            if not isinstance(ev, dict) or ev.get("reason") not in STUCK_REASONS:
                continue
            at = parse_time(ev.get("eventTime")) or parse_time(
                ev.get("deprecatedLastTimestamp") or ev.get("deprecatedFirstTimestamp"))
            at = at or datetime.now(UTC)
            if best is None or at > best[0]:
                best = (at, ev)
        if best is None:
            return None
        at, ev = best
        reason = clean_reason(ev.get("reason"))
        return PodVerdict(pod, uid, WAITING, reason,
                          clean_message(f"{reason}: {ev.get('note') or ''}"), None,
                          at.replace(microsecond=0))
