"""A task's transitions announced as Events (watcher/announce.py): which conditions are
news, and one Event name per transition, whoever writes it."""

from __future__ import annotations

from typing import Any

from tidings.schemas.wire.event import TaskRef
from tidings.watcher.announce import CONTROLLER, Transition, event_body, transitions

TASK = TaskRef("team-a", "train")


def cond(ctype: str, status: str, reason: str, since: str = "2026-12-07T15:00:00Z",
         message: str = "m") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since}


def test_news_is_a_failure_a_stall_while_running_or_a_pod_waiting_for_a_reason() -> None:
    running = {"phase": "Running", "conditions": [
        cond("Completed", "False", "Running"), cond("Failed", "False", "NoFailure"),
        cond("PodsReady", "False", "ImagePullBackOff"), cond("Stalled", "True", "NoProgress")]}
    assert [t.type for t in transitions(running)] == ["PodsReady", "Stalled"]
    quiet = {"phase": "Pending", "conditions": [cond("PodsReady", "False", "PodsPending"),
                                                cond("Stalled", "True", "NoProgress")]}
    assert transitions(quiet) == []  # not started yet; a stall of a task not running
    failed = {"phase": "Failed", "conditions": [
        cond("Failed", "True", "BackoffLimitExceeded"), cond("PodsReady", "False", "TaskFailed")]}
    assert [(t.type, t.reason) for t in transitions(failed)] == [
        ("Failed", "BackoffLimitExceeded")]


def test_one_event_name_per_transition_and_object() -> None:
    t = Transition("PodsReady", "ImagePullBackOff", "pod p: Back-off", "2026-12-07T15:00:00Z")
    a, b = event_body(TASK, "uid-1", t, "w-0"), event_body(TASK, "uid-1", t, "w-1")
    assert a["metadata"]["name"] == b["metadata"]["name"]  # another leader: a 409
    again = t._replace(since="2026-12-07T15:09:00Z")  # it waits again later: news again
    assert event_body(TASK, "uid-1", again, "w-0")["metadata"]["name"] != a["metadata"]["name"]
    assert event_body(TASK, "uid-2", t, "w-0")["metadata"]["name"] != a["metadata"]["name"]
    assert a["reportingController"] == CONTROLLER != "tidings.dev/bus"
    assert a["regarding"] == {"apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
                              "namespace": "team-a", "name": "train", "uid": "uid-1"}
    assert (a["type"], a["reason"]) == ("Warning", "ImagePullBackOff")
    long = event_body(TASK, "u", t._replace(message="é" * 5000), "w")
    assert len(long["note"].encode()) <= 1000
