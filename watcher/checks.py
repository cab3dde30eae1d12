"""The reads the admission rule asks for (``schemas/engine/admission.py``'s ``Checks``): may an
event's sender pod speak for its task (``senders.py``), and is the owner the pod's labels
claim a live object (``platform.py``). The watcher's fold and `tidings state --from-events`
both answer the rule with it.
"""

from __future__ import annotations

from tidings.schemas.engine.admission import Retry, Verdict
from tidings.schemas.wire.event import ParsedEvent, TaskRef
from tidings.schemas.wire.payloads import PodSpawned
from tidings.schemas.wire.rejection import Rejection

from .platform import PlatformTasks
from .senders import Senders


class AdmissionChecks:
    """The checks of one task's facts, each sender's answers kept while this object lives
    (one fold of a task): every input of the sender check for a task fact is in the key (the
    pod's namespace, name and uid, the sender proof; the task is this object's), so a repeat
    asks nothing new. Keyed by the PodRef's identity: the caller holds the events, which hold
    their senders, so no id is reused meanwhile (a caller that lets events go makes one
    object per event). Lineage (judged by the pod it names) and Retry are never kept."""

    def __init__(self, senders: Senders, platform: PlatformTasks, task: TaskRef) -> None:
        self.senders = senders
        self.platform = platform
        self.task = task
        self._verdicts: dict[tuple[int, str], str | Rejection] = {}
        # Verdicts given before the fold (``screen``), by event: the fold takes them as they
        # were, so each event's lookup is counted once, under how it was made.
        self._screened: dict[int, Verdict] = {}
        self._claims: dict[int, Rejection | None] = {}

    def sender(self, ev: ParsedEvent) -> Verdict:
        given = self._screened.pop(id(ev), None)
        if given is not None:
            return given
        key = (id(ev.sender), ev.sender_proof)
        lineage = type(ev.payload) is PodSpawned
        kept = None if lineage else self._verdicts.get(key)
        if kept is not None:
            return kept
        fresh = self.senders.verify(ev)
        if not lineage and not isinstance(fresh, Retry):
            # A pod fetched by "get" is in the pod cache from then on: a repeat would be
            # answered from it.
            self._verdicts[key] = "cache" if fresh == "get" else fresh
        return fresh

    def screen(self, ev: ParsedEvent) -> Verdict:
        """The sender's verdict ahead of the fold (is the event worth reading its task's
        object for?), kept for the fold to take."""
        verdict = self._screened[id(ev)] = self.sender(ev)
        return verdict

    def claim(self, ev: ParsedEvent) -> Rejection | Retry | None:
        if id(ev.sender) in self._claims:
            return self._claims[id(ev.sender)]
        got = self.platform.check_claim(self.task, self.senders.pod_task(self.task, ev.sender),
                                        ev.sender.name)
        if got is not Retry.LATER:
            self._claims[id(ev.sender)] = got
        return got
