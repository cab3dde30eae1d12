"""The TaskFeedback lifecycle, pure parts: regarding.uid on events, the controller-side helpers,
and the TTL rule (which objects a sweep may delete, and when)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.emitter import Identity
from tidings.emitter.task import TASK_UID_ANNOTATION, owner_ref, owner_reference, pod_task_uid
from tidings.schemas.engine.folding import fold
from tidings.schemas.engine.state import new_state
from tidings.schemas.wire.event import (
    ObjectRef,
    ParsedEvent,
    PodRef,
    TaskRef,
    build_event,
    parse_event,
)
from tidings.schemas.wire.payloads import LogLink, Progress
from tidings.watcher.ttl import expired, finished
from tidings.watcher.writer import status_body

UID = "0b5e6c1e-3f4a-4c43-9d55-2f6f0d6a1a11"
T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TASK = TaskRef("ml", "train-1")
POD = PodRef("train-1-0", "7d1c2f0a-0000-4000-8000-000000000001", "ml")


def event(payload: Any, *, seq: int = 1, task_uid: str = "", at: datetime = T0) -> dict[str, Any]:
    return build_event(task=TASK, pod=POD, payload=payload, instance="a" * 32, seq=seq, time=at,
                       task_uid=task_uid)


def test_the_task_uid_goes_into_regarding() -> None:
    ev = event(LogLink(name="wandb", url="https://wandb.ai/x"), task_uid=UID)
    assert ev["regarding"] == {"apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
                               "namespace": "ml", "name": "train-1", "uid": UID}
    parsed = parse_event(ev)
    assert isinstance(parsed, ParsedEvent) and parsed.regarding_uid == UID


@pytest.mark.parametrize("bad", ["", "not a uid", "x" * 65, "uid\nwith-newline", "a,b"])
def test_without_a_valid_uid_the_event_is_as_before(bad: str) -> None:
    ev = event(LogLink(name="wandb", url="https://wandb.ai/x"), task_uid=bad)
    assert "uid" not in ev["regarding"]
    assert ev == event(LogLink(name="wandb", url="https://wandb.ai/x"))


def test_the_emitter_reads_the_uid_from_the_downward_api_env() -> None:
    ident = Identity.from_env({"POD_NAMESPACE": "ml", "POD_NAME": "p", "POD_UID": "u",
                               "TIDINGS_TASK": "train-1", "TIDINGS_TASK_UID": f" {UID}\n"})
    assert ident.task_uid == UID and ident.missing() == []
    assert Identity.from_env({"TIDINGS_TASK": "t"}).task_uid == ""


def test_pod_task_uid_wires_the_annotation_to_the_env_var() -> None:
    wiring = pod_task_uid(UID)
    assert wiring["annotations"] == {TASK_UID_ANNOTATION: UID}
    (env,) = wiring["env"]
    assert env == {"name": "TIDINGS_TASK_UID", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['tidings.dev/task-uid']"}}}
    with pytest.raises(ValueError):
        pod_task_uid("nope nope")


def test_an_owner_is_taken_from_the_api_object_and_needs_its_uid() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "uid": UID}}
    ref = owner_ref(job)
    assert ref == ObjectRef("batch/v1", "Job", "train", "ml", UID)
    assert owner_reference(ref) == {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                    "uid": UID, "controller": True}
    with pytest.raises(ValueError, match="needs its uid"):
        owner_ref({**job, "metadata": {"name": "train"}})
    with pytest.raises(ValueError, match="apiVersion, kind and name"):
        owner_ref(ObjectRef("", "Job", "train", uid=UID))


# ---- TTL after finished ------------------------------------------------------------------
def stored(*, final: bool, last: datetime = T0, owners: list[dict[str, Any]] | None = None,
           deleting: bool = False, sender_clock: timedelta = timedelta(0)) -> dict[str, Any]:
    """A TaskFeedback as the API returns it, with the status the watcher writes: its facts
    received by the API server at ``last``, sent by a worker whose clock is off by
    ``sender_clock``."""
    state = new_state(TASK)
    for seq, payload in enumerate([LogLink(name="l", url="https://x.example/"),
                                   Progress(fraction=1.0 if final else 0.5, final=final)], 1):
        body = event(payload, seq=seq, at=last + sender_clock)
        body["metadata"]["creationTimestamp"] = last.strftime("%Y-%m-%dT%H:%M:%SZ")
        parsed = parse_event(body)
        assert isinstance(parsed, ParsedEvent)
        state = fold(state, parsed)
    meta: dict[str, Any] = {"name": TASK.name, "namespace": TASK.namespace,
                            "creationTimestamp": "2026-12-01T07:00:00Z"}
    if owners:
        meta["ownerReferences"] = owners
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T08:00:00Z"
    return {"metadata": meta, "status": status_body(state)}


def test_a_finished_unowned_task_expires_after_the_ttl_from_its_last_fact() -> None:
    obj = stored(final=True)
    assert expired(obj, T0 + timedelta(seconds=59), 60) is None
    state = expired(obj, T0 + timedelta(seconds=60), 60)
    assert state is not None and finished(state)


def test_idleness_is_measured_on_the_api_servers_clock_not_the_senders() -> None:
    """A worker whose clock is two hours behind does not get its task
    deleted the moment it finishes; one whose clock is ahead does not keep it longer."""
    behind = stored(final=True, sender_clock=timedelta(hours=-2))
    assert expired(behind, T0 + timedelta(seconds=59), 60) is None
    assert expired(behind, T0 + timedelta(seconds=60), 60) is not None
    ahead = stored(final=True, sender_clock=timedelta(hours=2))
    assert expired(ahead, T0 + timedelta(seconds=60), 60) is not None


def test_running_owned_or_deleting_tasks_never_expire() -> None:
    late = T0 + timedelta(days=30)
    assert expired(stored(final=False), late, 60) is None
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": UID}
    assert expired(stored(final=True, owners=[owner]), late, 60) is None
    assert expired(stored(final=True, deleting=True), late, 60) is None


def test_without_facts_the_creation_time_counts() -> None:
    obj = {"metadata": {"name": "t", "namespace": "ml",
                        "creationTimestamp": "2026-12-01T07:00:00Z"}, "status": {}}
    # No status: nothing says it finished, so it stays whatever its age.
    assert expired(obj, T0 + timedelta(days=1), 1) is None


@given(ttl_ms=st.integers(min_value=1, max_value=10**10),
       age_ms=st.integers(min_value=-10**10, max_value=10**10),
       final=st.booleans(), owned=st.booleans())
def test_expiry_is_exactly_finished_unowned_and_old_enough(ttl_ms: int, age_ms: int,
                                                           final: bool, owned: bool) -> None:
    owners = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": UID}] if owned else []
    obj = stored(final=final, owners=owners)
    got = expired(obj, T0 + timedelta(milliseconds=age_ms), ttl_ms / 1000)
    assert (got is not None) == (final and not owned and age_ms >= ttl_ms)
