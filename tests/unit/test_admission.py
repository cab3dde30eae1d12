"""One admission rule: the watcher and `tidings state --from-events` (the CLI's local fold)
admit the same facts of a task, given the same pods and the same TaskFeedback. Pure: the
watcher is built without a client (its pod cache holds the pods) and the CLI reads a fake
API that serves the same pods and events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.schemas import LogLink, PodRef, PodSpawned, Progress, TaskRef
from tidings.schemas.engine.admission import (
    Retry,
    TaskObject,
    Verdict,
    about_its_pod,
    admission,
    is_task_fact,
)
from tidings.schemas.wire.constants import KIND, TASK_LABEL
from tidings.schemas.wire.event import ObjectRef, ParsedEvent, build_event, parse_event
from tidings.schemas.wire.platform import DEFAULT_TASK_KEYS, pod_task
from tidings.schemas.wire.rejection import Rejection, RejectReason
from tidings.watcher.controller import Controller
from tidings.watcher.metrics import Metrics
from tidings.watcher.settings import Settings

NS = "team-a"
TASK = TaskRef(NS, "train-1")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
WORKER = PodRef("train-1-0", "uid-w", NS)
SPAWNED = PodRef("train-1-1", "uid-s", NS)


def _pod(ref: PodRef, task: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid,
                         "labels": {TASK_LABEL: task}},
            "status": {"phase": "Running"}}


PODS = [_pod(WORKER, TASK.name), _pod(SPAWNED, TASK.name)]


def _raw(payload: Any, seq: int, *, regarding: ObjectRef | None = None, task_uid: str = ""
         ) -> dict[str, Any]:
    raw = build_event(task=TASK, pod=WORKER, payload=payload, instance="run-1", seq=seq,
                      time=T0 + timedelta(seconds=seq), regarding=regarding,
                      task_uid=task_uid, sender_proof=False)
    raw["metadata"]["resourceVersion"] = str(seq)
    return raw


@dataclass
class FakeKube:
    """What the CLI's local fold reads, served from memory: the events by field selector
    (their regarding kind), the pods by path and by label; no TaskFeedback, no policy."""

    events: list[dict[str, Any]]
    namespace: str = NS
    client: Any = None

    def list_events(self, namespace: str | None, selector: str
                    ) -> tuple[list[dict[str, Any]], str]:
        kind = "Pod" if "regarding.kind=Pod" in selector else KIND
        return [e for e in self.events if e["regarding"]["kind"] == kind], "100"

    def list_pods(self, namespace: str, selector: str) -> tuple[list[dict[str, Any]], str]:
        key, _, value = selector.partition("=")
        return [p for p in PODS if p["metadata"]["labels"].get(key) == value], "100"

    def get_json(self, path: str, query: Any = None, *, action: Any = None) -> Any:
        return next((p for p in PODS if path.endswith(f"/pods/{p['metadata']['name']}")),
                    None)


def watcher_admits(raws: list[dict[str, Any]], uid: str | None, stale: set[str]
                   ) -> set[tuple[str, int]]:
    """The (instance, seq) the watcher folds into TASK, its object ``uid`` (None: none)."""
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    for pod in PODS:
        meta = pod["metadata"]
        c.senders.put((meta["namespace"], meta["name"], meta["uid"]),
                      pod_task(meta, DEFAULT_TASK_KEYS))
    c.store.load(TASK, None, rv="7" if uid else None, uid=uid, exists=uid is not None)
    c.store.stale(TASK, stale)
    c.delivery.deliver_many([parse_event(r) for r in raws], raws)
    c.folder.fold_task(TASK)
    state = c.store.get(TASK)
    assert state is not None
    return {key for key in map(_key, raws) if state.applied.contains(*key)}


def _key(raw: dict[str, Any]) -> tuple[str, int]:
    ev = parse_event(raw)
    assert isinstance(ev, ParsedEvent)
    return ev.instance, ev.seq


def cli_admits(raws: list[dict[str, Any]], uid: str | None) -> set[tuple[str, int]]:
    """The (instance, seq) `tidings state --from-events` folds for TASK ("" : no object)."""
    from tidings.cli.taskread import TaskReader

    snap = TaskReader(FakeKube(raws), TASK).from_events(None, uid or "")  # type: ignore[arg-type]
    return {key for key in map(_key, raws) if snap.state.applied.contains(*key)}


OTHER_GROUP = ObjectRef("evil.example/v1", KIND, TASK.name, NS)
OWN_POD = ObjectRef("v1", "Pod", WORKER.name, NS, WORKER.uid)

CASES = [
    pytest.param([_raw(LogLink(name="w", url="https://x.y/"), 1)], None, set(), id="a-fact"),
    pytest.param([_raw(PodSpawned(pod_name=SPAWNED.name, pod_uid=SPAWNED.uid, app=TASK.name),
                       1)], None, set(), id="lineage"),
    pytest.param([_raw(Progress(fraction=0.5), 1, task_uid="uid-old"),
                  _raw(Progress(fraction=0.6), 2, task_uid="uid-now")], "uid-now", {"uid-old"},
                 id="a-stale-uid"),
    pytest.param([_raw(Progress(fraction=0.5), 1, task_uid="uid-old")], None, {"uid-old"},
                 id="a-uid-with-no-object"),
    pytest.param([_raw(PodSpawned(pod_name=SPAWNED.name, pod_uid=SPAWNED.uid, app=TASK.name),
                       1, regarding=OTHER_GROUP)], None, set(), id="lineage-of-another-group"),
    pytest.param([_raw(PodSpawned(pod_name=SPAWNED.name, pod_uid=SPAWNED.uid, app=TASK.name),
                       1, regarding=OWN_POD)], None, set(), id="lineage-about-its-own-pod"),
]


@pytest.mark.parametrize(("raws", "uid", "stale"), CASES)
def test_the_watcher_and_the_local_fold_admit_the_same_facts(
        raws: list[dict[str, Any]], uid: str | None, stale: set[str]) -> None:
    assert cli_admits(raws, uid) == watcher_admits(raws, uid, stale)


# --- the rule itself (schemas/engine/admission.py), pure --------------------------------------

SPOOF = Rejection.of(RejectReason.SPOOFED_SENDER, "spoofed")
FORGED = Rejection.of(RejectReason.UNVERIFIED_OWNER, "forged")


@dataclass
class Said:
    """Checks that answer as told, and remember what they were asked."""

    sender_says: Verdict
    claim_says: Rejection | Retry | None
    asked: list[str] = field(default_factory=list)

    def sender(self, ev: ParsedEvent) -> Verdict:
        self.asked.append("sender")
        return self.sender_says

    def claim(self, ev: ParsedEvent) -> Rejection | Retry | None:
        self.asked.append("claim")
        return self.claim_says


def _fact(uid: str = "") -> ParsedEvent:
    """A fact of emitter instance run-1 naming the TaskFeedback ``uid`` (or none)."""
    ev = parse_event(_raw(Progress(fraction=0.5), 1, task_uid=uid))
    assert isinstance(ev, ParsedEvent)
    return ev


def _reason(v: Verdict) -> str:
    return v.reason.value if isinstance(v, Rejection) else str(v)


@pytest.mark.parametrize(("sender", "claim", "uid", "obj", "said"), [
    ("cache", None, "", TaskObject("uid-1"), "cache"),
    ("proof", None, "uid-1", TaskObject("uid-1"), "proof"),
    (SPOOF, FORGED, "uid-0", TaskObject("uid-1"), "spoofed_sender"),  # the sender first
    (Retry.LATER, FORGED, "", TaskObject(""), "Retry.LATER"),
    ("get", FORGED, "uid-0", TaskObject("uid-1"), "unverified_owner"),  # then the claim
    ("get", Retry.LATER, "uid-0", TaskObject("uid-1"), "Retry.LATER"),
    ("cache", None, "uid-0", TaskObject("uid-1"), "other_object"),  # then the object
    ("cache", None, "uid-0", TaskObject(""), "other_object"),  # none exists
    ("cache", None, "uid-1", TaskObject("uid-1", stale=frozenset({"uid-1"})), "other_object"),
    ("cache", None, "uid-0", TaskObject(None), "cache"),  # unreadable: not checked
    ("cache", None, "", TaskObject("", buried=frozenset({"run-1"})), "deleted_task"),
    ("cache", None, "uid-0", TaskObject("", buried=frozenset({"run-1"})), "other_object"),
])
def test_the_rule_checks_sender_then_claim_then_object_then_run(
        sender: Verdict, claim: Rejection | Retry | None, uid: str, obj: TaskObject,
        said: str) -> None:
    assert _reason(admission(_fact(uid), obj, Said(sender, claim))) == said


@given(sender=st.sampled_from(["cache", "get", "proof", SPOOF, Retry.LATER]),
       claim=st.sampled_from([None, FORGED, Retry.LATER]),
       named=st.sampled_from(["", "uid-0", "uid-1"]),
       uid=st.sampled_from([None, "", "uid-1"]),
       stale=st.frozensets(st.sampled_from(["uid-0", "uid-1"])),
       buried=st.frozensets(st.sampled_from(["run-1", "run-2"])))
def test_an_admitted_fact_passed_every_check_and_a_refused_sender_costs_no_claim_read(
        sender: Verdict, claim: Rejection | Retry | None, named: str, uid: str | None,
        stale: frozenset[str], buried: frozenset[str]) -> None:
    checks = Said(sender, claim)
    got = admission(_fact(named), TaskObject(uid, stale, buried), checks)
    assert checks.asked == (["sender", "claim"] if isinstance(sender, str) else ["sender"])
    if isinstance(got, str):
        assert got == sender and claim is None and "run-1" not in buried
        assert not named or uid is None or (named == uid and named not in stale)
    elif isinstance(got, Rejection) and got.reason in (RejectReason.OTHER_OBJECT,
                                                     RejectReason.DELETED_TASK):
        assert isinstance(sender, str) and claim is None


def test_which_facts_are_a_tasks() -> None:
    fact = parse_event(_raw(LogLink(name="w", url="https://x.y/"), 1))
    other = parse_event(_raw(PodSpawned(pod_name="p", pod_uid="u", app=TASK.name), 2,
                             regarding=OTHER_GROUP))
    own = parse_event(_raw(LogLink(name="w", url="https://x.y/"), 3, regarding=OWN_POD))
    own_lineage = parse_event(_raw(PodSpawned(pod_name="p", pod_uid="u", app=TASK.name), 4,
                                   regarding=OWN_POD))
    assert is_task_fact(fact, TASK) and not is_task_fact(fact, TaskRef(NS, "other"))
    assert not is_task_fact(other, TASK) and not is_task_fact(None, TASK)
    assert isinstance(own, ParsedEvent) and isinstance(own_lineage, ParsedEvent)
    assert about_its_pod(own) and not about_its_pod(own_lineage)
    assert not is_task_fact(own, TASK)
