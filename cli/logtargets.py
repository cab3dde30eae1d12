"""Which logs `tidings logs` may show, like stern's targets: a lineage entry (PodSpawned
record, TaskFeedback status or label list) becomes the pod/container targets it confirms, and
one PodView, refreshed by one list of the app's labelled pods per tick (per task key that
found them), tells every stream whether its pod is still the one it was (same uid, still
labelled for the task) and whether it ended.

Pods are identified by name AND uid; a pod that now carries the name under another uid is
someone else and is never streamed, nor is one whose labels do not name the task
(tidings.dev/task=<app>, or its platform's task key: cli/lineage.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from tidings.cli.common import EXIT_NOT_FOUND, CliError
from tidings.cli.kube import ApiError, Kube
from tidings.cli.lineage import names_task, vouches
from tidings.kube.flowcontrol import Backoff
from tidings.kube.objects import KubeObject
from tidings.schemas import TASK_LABEL, LineageEntry
from tidings.schemas.wire.contract import TERMINAL_PHASES
from tidings.schemas.wire.platform import task_selector


class Wanted(Protocol):
    """What ``targets`` reads of the logs options (logtail.py's ``Options``)."""

    @property
    def follow(self) -> bool: ...

    @property
    def container(self) -> str | None: ...


class Notes(Protocol):
    """Where ``targets`` says why a pod has no logs (logtail.py's ``Printer``)."""

    def note(self, message: str) -> None: ...


@dataclass(frozen=True)
class Target:
    """One container of one pod of the app: what a tail streams."""

    pod: str
    uid: str
    container: str


def targets(kube: Kube, ns: str, entry: LineageEntry, opt: Wanted, printer: Notes,
            stopped: threading.Event) -> list[Target]:
    """The containers of the entry's pod when that pod is there under the recorded uid and
    carries the app's label (with -f, a pod not visible yet is waited for, 30 s at most);
    else a note on stderr and none. An unknown -c is an error, as kubectl's."""
    name, uid = entry.pod.name, entry.pod.uid
    wait, deadline = Backoff(base=0.2, cap=2.0, jitter=0.0), time.monotonic() + 30.0
    while True:
        pod = kube.get_pod(ns, name)
        if pod is not None:
            break
        if not opt.follow or time.monotonic() > deadline or stopped.is_set():
            printer.note(f"- {name}: gone (uid {uid[:8]}), no logs")
            return []
        stopped.wait(wait.next())  # the record may arrive before the pod is visible
    current = _uid(pod)
    if current != uid:
        printer.note(f"- {name}: replaced (recorded uid {uid[:8]}, now {current[:8]}); "
                     "not streaming the new pod, it is not in the lineage")
        return []
    if not vouches(entry, pod):  # the record's word is not enough (cli/lineage.py)
        printer.note(f"- {name}: not labelled {TASK_LABEL}={entry.subject.name} (nor by its "
                     "platform's task key); not streaming a pod that does not confirm the "
                     "lineage record")
        return []
    spec = pod.get("spec") or {}
    names = [str(c.get("name")) for c in spec.get("containers") or [] if c.get("name")]
    if opt.container is not None:
        if opt.container not in names:  # like kubectl: an error, not silence
            raise CliError(f"not found: container {opt.container!r} in pod {name} "
                           f"(its containers: {', '.join(names) or 'none'})", EXIT_NOT_FOUND)
        names = [opt.container]
    return [Target(name, uid, c) for c in names]


class PodView:
    """The app's labelled pods as of the last list, shared by the mux's monitor and every
    tail: a tail whose stream ended asks ``check``, and a list taken since is reused, so
    many streams ending together (an API server restart) cost one list, not a GET each.

    Without the right to list pods (only get), each check is one GET, as before."""

    def __init__(self, kube: Kube, ns: str, app: str) -> None:
        self.kube = kube
        self.ns = ns
        self.app = app
        self._lock = threading.Lock()
        self.keys: tuple[str, ...] = (TASK_LABEL,)  # the task keys that find the app's pods
        self.may_list = True
        self.tried_at = -1.0  # when the last list was sent (monotonic), even a failed one
        self.phases: dict[str, str] | None = None  # uid -> phase of that list; None: failed
        self.lists = 0  # lists sent (for tests and the curious)

    def refresh(self) -> dict[str, str] | None:
        """List the app's labelled pods now (the monitor's tick): uid -> phase, or None when
        the list failed (unknown: the next tick asks again). Never raises."""
        with self._lock:
            return self._refresh(strict=False)

    def _refresh(self, strict: bool = True) -> dict[str, str] | None:
        """As refresh; ``strict`` (a tail asking) raises when the credentials are rejected,
        as the tail's own request would."""
        self.tried_at = time.monotonic()
        self.lists += 1
        try:
            pods = [p for key in self.keys
                    for p in self.kube.list_pods(self.ns, task_selector(key, self.app))[0]
                    if names_task(p, self.app)]
        except ApiError as err:
            if strict and err.unauthorized:
                raise
            self.may_list = self.may_list and not err.forbidden
            self.phases = None
            return None
        except CliError:  # unreachable for now: the next tick asks again
            self.phases = None
            return None
        self.phases = {_uid(p): str((p.get("status") or {}).get("phase") or "") for p in pods}
        return self.phases

    def check(self, t: Target, since: float) -> tuple[str, str]:
        """Why ``t``'s stream should end ("" when it should not) and its pod's phase ("" when
        unknown), from a list taken after ``since`` (the stream's start) when that list
        already shows the pod gone or ended, else from a fresh list shared with the tails
        that ended meanwhile. A pod missing from the list is read once to say why."""
        if not self.may_list:
            return self._get(t)
        ended = time.monotonic()
        with self._lock:
            phases = self.phases
            shows_end = phases is not None and (
                t.uid not in phases or phases[t.uid] in TERMINAL_PHASES)
            # Taken since the stream began and it explains the end; or taken since the end
            # (by a tail that ended with this one): either way no new list is needed.
            if not ((self.tried_at >= since and (phases is None or shows_end))
                    or self.tried_at >= ended):
                phases = self._refresh()
        if phases is None:
            return ("", "") if self.may_list else self._get(t)
        if t.uid in phases:
            return "", phases[t.uid]
        return self._get(t)  # gone, replaced or unlabelled: one read says which

    def _get(self, t: Target) -> tuple[str, str]:
        try:
            pod = self.kube.get_pod(self.ns, t.pod)
        except ApiError as err:
            if err.denied:
                raise
            return "", ""
        except CliError:
            return "", ""
        if pod is None:
            return "pod gone", ""
        if _uid(pod) != t.uid:
            return "pod replaced", ""
        if not names_task(pod, self.app):
            return f"pod no longer labelled {self.keys[0]}={self.app}", ""
        return "", str((pod.get("status") or {}).get("phase") or "")


def _uid(pod: KubeObject) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")
