"""Which tasks the watcher makes exist before any of their pods reports (``--track``): a
task's platform object, or a pod carrying a task key, in a tracked namespace and matching
the object selector, brings its TaskFeedback into being (Pending, owned by the object), so
that a pod that cannot be scheduled, pull its image or start is shown instead of "not found".

The default tracks the watched namespaces but ``kube-*`` and the watcher's own (its
Deployment's Jobs are not tasks); ``reported-only`` keeps the older rule, a task from its
first fact. An object that ended longer than the event TTL before the watcher saw it is
history, not news: it makes no task (a first install does not create one TaskFeedback per
Job the cluster ever ran).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from tidings._compat import UTC
from tidings.schemas.engine.observed import PodVerdict

from .kubelet_events import creating_since
from .settings import Settings

# One requirement of an equality-based label selector: (key, op, value), op one of
# "=", "!=", "exists", "!exists" (kubectl's `-l` grammar without the set operators).
Requirement = tuple[str, str, str]
_REQUIREMENT: Final = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[-A-Za-z0-9_.]*))?\s*$")


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """``key=value,key!=value,key,!key`` as requirements; raises ValueError (one line) for
    anything else (set-based ``in``/``notin`` included: say it with several requirements)."""
    out: list[Requirement] = []
    for part in (p for p in text.split(",") if p.strip()):
        m = _REQUIREMENT.match(part)
        if m is None or (m["neg"] and m["op"]):
            raise ValueError(f"{part.strip()[:80]!r} is not a label requirement "
                             "(key=value, key!=value, key or !key)")
        op = {"==": "=", None: "!exists" if m["neg"] else "exists"}.get(m["op"], m["op"])
        out.append((m["key"], op, m["value"] or ""))
    return tuple(out)


def matches(selector: tuple[Requirement, ...], labels: object) -> bool:
    """Whether ``labels`` (as the API returns them) satisfy every requirement."""
    have: Mapping[str, object] = labels if isinstance(labels, Mapping) else {}
    for key, op, value in selector:
        got = have.get(key)
        if (op == "exists" and key not in have) or (op == "!exists" and key in have) \
                or (op == "=" and got != value) or (op == "!=" and got == value):
            return False
    return True


@dataclass(frozen=True, slots=True)
class Tracking:
    """The ``--track`` rule: ``namespace`` and ``selects`` say whether an object counts;
    ``fresh`` whether an end is recent enough to be news."""

    on: bool
    own_namespace: str
    skip: frozenset[str]
    selector: tuple[Requirement, ...]
    history: timedelta

    @classmethod
    def of(cls, s: Settings, own_namespace: str) -> Tracking:
        """From the settings; raises ValueError for a bad selector. History: older than the
        event TTL (its facts are gone), or than --ttl-after-finished (its task was deleted)."""
        history = min(s.event_ttl, s.ttl_after_finished or s.event_ttl)
        return cls(s.track == "platform", own_namespace, frozenset(s.track_skip_namespaces),
                   parse_selector(s.track_selector), timedelta(seconds=history))

    def namespace(self, ns: str) -> bool:
        return self.on and bool(ns) and not ns.startswith("kube-") \
            and ns != self.own_namespace and ns not in self.skip

    def selects(self, ns: str, labels: object) -> bool:
        return self.namespace(ns) and matches(self.selector, labels)

    def pod_makes_task(self, obj: object, verdict: PodVerdict | None) -> bool:
        """The pod ``obj`` (its verdict: ``observed.pod_verdict``) makes its task exist: in a
        tracked namespace, selected, and it cannot run: not scheduled, waiting for a reason,
        stuck being created, or failed (not longer ago than the history kept). A pod that
        runs, or ran, says so itself when it is instrumented, and its platform object makes
        its task anyway (a task that finished and was deleted is not made again by its pods
        lingering on)."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not self.selects(str(meta.get("namespace", "")),
                                                          meta.get("labels")):
            return False
        if verdict is None:
            return creating_since(obj) is not None
        return not verdict.terminal or (verdict.failed and self.fresh(verdict.at))

    def fresh(self, ended: datetime | None) -> bool:
        """An end at ``ended`` (None: not ended) is recent enough to make a task."""
        return ended is None or datetime.now(UTC) - ended <= self.history


OFF: Final = Tracking(False, "", frozenset(), (), timedelta(0))
