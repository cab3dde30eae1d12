"""Admission, closed: what the watcher remembers of a pod never stands in for the pod's own
word. A pod that is gone counts only through its sender proof, whether it was never seen or
seen deleted; the watcher's memory of deleted pods routes their proven facts, never admits
an unproven one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tidings.schemas import PodRef, PodSpawned, Progress, TaskRef, fold, new_state
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.constants import TASK_LABEL
from tidings.schemas.wire.contract import SENDER_POLICY as POLICY
from tidings.schemas.wire.contract import SENDER_POLICY_BINDING_PATH, SENDER_POLICY_PATH
from tidings.schemas.wire.event import ParsedEvent, build_event, parse_event
from tidings.schemas.wire.platform import DEFAULT_TASK_KEYS, pod_task
from tidings.schemas.wire.record import POD_FIELDS, fields_of
from tidings.schemas.wire.rejection import Rejection, RejectReason
from tidings.watcher.senders import ProofPolicy, Senders

NS = "team-a"
TASK = TaskRef(NS, "train-1")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
WORKER = PodRef("train-1-0", "uid-w", NS)


def _policy(installed: bool) -> ProofPolicy:
    """The admission policy and its Deny binding, installed or not."""
    objects: dict[str, Any] = {
        SENDER_POLICY_PATH: {"metadata": {"name": POLICY}},
        SENDER_POLICY_BINDING_PATH: {"spec": {"policyName": POLICY,
                                              "validationActions": ["Deny"]}},
    } if installed else {}
    return ProofPolicy(objects.get, quiet=True)


def _senders(installed: bool = True) -> Senders:
    """A watcher's pod cache (no API: every pod it knows it was told of)."""
    s = Senders(None, policy=_policy(installed))
    meta = {"namespace": NS, "name": WORKER.name, "uid": WORKER.uid,
            "labels": {TASK_LABEL: TASK.name}}
    s.put((NS, WORKER.name, WORKER.uid), pod_task(meta, DEFAULT_TASK_KEYS))
    return s


def _fact(*, proof: bool, seq: int = 1) -> ParsedEvent:
    raw = build_event(task=TASK, pod=WORKER, payload=Progress(fraction=0.5), instance="run-1",
                      seq=seq, time=T0, sender_proof=proof)
    ev = parse_event(raw)
    assert isinstance(ev, ParsedEvent)
    return ev


def test_a_live_pod_speaks_for_its_task_with_or_without_the_proof() -> None:
    s = _senders()
    assert s.verify(_fact(proof=False)) == "cache"
    assert s.verify(_fact(proof=True)) == "cache"


def test_a_fact_naming_a_deleted_pod_without_the_proof_is_refused() -> None:
    """The attack: anyone who may create events in the namespace names a pod the watcher saw
    deleted (its name and uid are in every event it sent); the watcher's memory of the pod's
    labels must not vouch for the event."""
    s = _senders()
    s.delete((NS, WORKER.name, WORKER.uid))
    got = s.verify(_fact(proof=False))
    assert isinstance(got, Rejection) and got.reason is RejectReason.SPOOFED_SENDER, got
    assert "gone" in got.message


def test_a_deleted_pods_proven_fact_counts_where_the_proof_is_enforced() -> None:
    s = _senders(installed=True)
    s.delete((NS, WORKER.name, WORKER.uid))
    assert s.verify(_fact(proof=True)) == "proof"
    unenforced = _senders(installed=False)
    unenforced.delete((NS, WORKER.name, WORKER.uid))
    got = unenforced.verify(_fact(proof=True))
    assert isinstance(got, Rejection) and got.reason is RejectReason.SPOOFED_SENDER


def test_a_deleted_pod_proven_but_labelled_for_another_task_is_refused() -> None:
    """The proof says who sent it; the labels remembered say which task the pod was for."""
    s = _senders()
    s.delete((NS, WORKER.name, WORKER.uid))
    other = build_event(task=TaskRef(NS, "train-2"), pod=WORKER, payload=Progress(fraction=0.5),
                        instance="run-1", seq=1, time=T0, sender_proof=True)
    ev = parse_event(other)
    assert isinstance(ev, ParsedEvent)
    got = s.verify(ev)
    assert isinstance(got, Rejection) and got.reason is RejectReason.SPOOFED_SENDER


# --- lineage recorded from another namespace ---


def test_a_lineage_controller_in_another_namespace_is_no_reporting_pod_of_the_task() -> None:
    """``status.pods`` lists the task's reporting pods by name and uid, read as pods of the
    task's namespace (`tidings lineage` shows the ones it cannot find there as gone): the
    controller that recorded a spawn from its own namespace must not be listed, or its live
    pod reads as a dead pod of the task."""
    controller = PodRef("lineage-ctrl-0", "uid-c", "ops")
    spawn = parse_event(build_event(
        task=TASK, pod=controller, instance="ctrl-1", seq=1, time=T0, sender_proof=False,
        payload=PodSpawned(pod_name=WORKER.name, pod_uid=WORKER.uid, app=TASK.name)))
    assert isinstance(spawn, ParsedEvent) and spawn.sender.namespace == "ops"
    report = _fact(proof=False, seq=2)
    state = fold(fold(new_state(TASK), spawn), report)
    assert state.counters.get("pods_spawned") == 1  # the lineage is folded
    assert dict(state.pod_events) == {(WORKER.name, WORKER.uid): 1}
    assert [fields_of(p, POD_FIELDS)["name"] for p in to_status(state)["pods"]] == [WORKER.name]
