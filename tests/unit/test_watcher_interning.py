"""The pod and platform caches keep one copy of what objects share
(``watcher/interning.py``): 20 pods of a Job hold one claim, one task and one node name,
whichever watch event decoded them, and the table forgets what no pod holds any more."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tidings.schemas.wire.event import TaskRef
from tidings.watcher import interning
from tidings.watcher.interning import Interner
from tidings.watcher.platform import JOB, PlatformTasks
from tidings.watcher.senders import Senders
from tidings.watcher.settings import Settings
from tidings.watcher.tracking import Tracking

JOB_UID = "29e80fec-ac13-47d3-a1f3-64dade19aab8"


def _pod(i: int, *, node: str = "node-0", phase: str = "Running",
         waiting: str = "") -> dict[str, Any]:
    """A Job's pod as the API server sends it, decoded afresh (its own strings)."""
    status: dict[str, Any] = {"phase": phase, "startTime": "2026-12-07T18:00:00Z"}
    if waiting:
        status["containerStatuses"] = [{"name": "m", "ready": False, "restartCount": 0,
                                        "state": {"waiting": {"reason": waiting,
                                                              "message": "pull failed"}}}]
    pod = {"metadata": {
        "name": f"job-a-{i}", "namespace": "team-a", "uid": f"pod-uid-{i:04d}",
        "labels": {"batch.kubernetes.io/job-name": "job-a", "job-name": "job-a",
                   "batch.kubernetes.io/controller-uid": JOB_UID, "controller-uid": JOB_UID},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "job-a",
                             "uid": JOB_UID, "controller": True}]},
        "spec": {"nodeName": node}, "status": status}
    out: dict[str, Any] = orjson.loads(orjson.dumps(pod))
    return out


def _line(wtype: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": wtype, "object": obj})


def _senders() -> Senders:
    return Senders(None, tracking=Tracking.of(Settings(), "tidings"))


def test_the_pods_of_one_job_share_their_claim_task_and_node() -> None:
    senders = _senders()
    source = next(s for s in senders.sources() if s.key == "batch.kubernetes.io/job-name")
    source.list_begin()
    source.list_page([_pod(i) for i in range(20)])  # type: ignore[list-item]
    source.list_done("1")
    for i in range(20):  # every pod updated once: a fresh decode of the same values
        source.watch_line(_line("MODIFIED", _pod(i)))
    live = senders._live
    claims = {id(t) for t in live.values()}
    assert len(live) == 20 and len(claims) == 1
    assert len({id(k[0]) for k in live}) == 1  # one namespace string
    task = TaskRef("team-a", "job-a")
    assert senders.running(task)[0] == 20
    on_node = senders._places._on_node["node-0"]
    assert len({id(t) for t in on_node.values()}) == 1
    assert len({id(n) for n in senders._places._node_of.values()}) == 1


def test_waiting_pods_share_their_reason_and_message_and_keep_their_own_names() -> None:
    senders = _senders()
    source = next(s for s in senders.sources() if s.key == "batch.kubernetes.io/job-name")
    for i in range(5):
        source.watch_line(_line("ADDED", _pod(i, phase="Pending", waiting="ImagePullBackOff")))
    verdicts = senders.verdicts(TaskRef("team-a", "job-a"))
    assert sorted(v.pod for v in verdicts) == [f"job-a-{i}" for i in range(5)]
    assert len({id(v.message) for v in verdicts}) == 1
    keys = {k[1]: k for k in senders._live}
    assert all(v.pod is keys[v.pod][1] and v.uid is keys[v.pod][2] for v in verdicts)


def test_the_table_forgets_what_nothing_else_holds() -> None:
    table = Interner()
    held = [table("kept-" + "x" * i) for i in range(10)]
    for i in range(100):
        table(f"dropped-{i}")
    table._prune()
    assert len(table) == 10
    assert all(table(copy.copy("kept-" + "x" * i)) is held[i] for i in range(10))


def test_the_table_is_pruned_when_it_doubles() -> None:
    table = Interner()
    for i in range(3 * interning._MIN_PRUNE):
        table(f"value-{i}")
    assert len(table) < interning._MIN_PRUNE


@given(st.lists(st.text(max_size=8)))
def test_an_interned_value_is_an_equal_one(values: list[str]) -> None:
    table = Interner()
    firsts: dict[str, str] = {}
    for v in values:
        got = table(v)
        assert got == v and got is firsts.setdefault(v, got)


def test_an_update_of_a_job_that_changes_nothing_keeps_the_copy_held() -> None:
    platform = PlatformTasks(None)
    source = platform.sources()[0]
    assert source.kind is JOB

    def job(i: int) -> dict[str, Any]:
        out: dict[str, Any] = orjson.loads(orjson.dumps({"metadata": {
            "name": f"job-{i}", "namespace": "team-a", "uid": f"job-uid-{i}"},
            "spec": {"completions": 2}, "status": {"active": 2}}))
        return out

    for i in range(3):
        source.watch_line(_line("ADDED", job(i)))
    held = dict(platform._objects)
    for i in range(3):
        source.watch_line(_line("MODIFIED", job(i)))
    assert all(platform._objects[k] is v for k, v in held.items())
    assert len({id(k[1]) for k in platform._objects}) == 1  # one namespace string
