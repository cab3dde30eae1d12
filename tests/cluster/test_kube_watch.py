"""tidings.kube's one list+watch loop against the real API server: it lists in pages, watches
from the list's resourceVersion, resumes after the server ends a watch, relists when the
version is gone, hands failures to its one error callback, and stops from another thread."""

from __future__ import annotations

import queue
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from kubernetes import client as k8s

from tests.support import eventually
from tidings.kube import Client, KubeError, connect
from tidings.kube.flowcontrol import Backoff
from tidings.kube.watch import Change, Listing, ListWatch, Page, Rewatch, WatchLines
from tools.devcluster import ControlPlane

LABEL = "tidings.dev/watch-test"
QUICK = Backoff(base=0.05, cap=0.2, jitter=0.0)


@pytest.fixture
def client(control_plane: ControlPlane) -> Iterator[Client]:
    c = connect(str(control_plane.kubeconfig("admin")))
    yield c
    c.close()


def configmap(admin: Any, namespace: str, name: str) -> None:
    k8s.CoreV1Api(admin).create_namespaced_config_map(namespace, k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name=name, labels={LABEL: "yes"})))


def decode(loop: ListWatch, lines: list[bytes]) -> list[tuple[str, str]]:
    """What a caller does with the raw lines: (type, name) of each, the version reached, and
    a relist on an ERROR Status (410: the version is gone)."""
    out = []
    for line in lines:
        msg = orjson.loads(line)
        obj = msg.get("object") or {}
        if msg["type"] == "ERROR":
            loop.relist("gone" if obj.get("code") == 410 else "error")
            out.append(("ERROR", str(obj.get("reason") or "")))
            break
        loop.advance(str((obj.get("metadata") or {}).get("resourceVersion") or ""))
        out.append((msg["type"], str((obj.get("metadata") or {}).get("name") or "")))
    return out


def run(loop: ListWatch) -> queue.Queue[Change | tuple[str, str]]:
    """Iterate ``loop`` on a thread; each change (watch lines decoded) into the queue."""
    seen: queue.Queue[Change | tuple[str, str]] = queue.Queue()

    def pump() -> None:
        for change in loop:
            if isinstance(change, WatchLines):
                for item in decode(loop, change.lines):
                    seen.put(item)
            else:
                seen.put(change)

    threading.Thread(target=pump, daemon=True).start()
    return seen


def until(seen: queue.Queue[Any], want: Any, timeout: float = 20.0) -> list[Any]:
    """Everything the loop gave, up to and including the first item ``want`` accepts."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out; the loop gave {got}"
        try:
            item = seen.get(timeout=left)
        except queue.Empty:
            continue
        got.append(item)
        if want(item):
            return got


def test_lists_in_pages_then_watches_from_the_list_and_resumes_after_the_server_ends_it(
        control_plane: ControlPlane, admin: Any, namespace: str, client: Client) -> None:
    for i in range(3):
        configmap(admin, namespace, f"before-{i}")
    loop = ListWatch(client, f"/api/v1/namespaces/{namespace}/configmaps",
                     {"labelSelector": LABEL}, page_size=2, watch_timeout=1, short_watch=0.5,
                     backoff=QUICK)
    seen = run(loop)
    try:
        first = until(seen, lambda c: isinstance(c, Page) and c.last)
        assert first[0] == Listing("start")
        pages = [c for c in first if isinstance(c, Page)]
        assert [len(p.items) for p in pages] == [2, 1] and not pages[0].last
        listed_rv = pages[-1].resource_version
        assert listed_rv
        # The server ends each watch after 1 s: the loop resumes from where it was, no list.
        after = until(seen, lambda c: isinstance(c, Rewatch))
        assert not any(isinstance(c, Listing | Page) for c in after)
        configmap(admin, namespace, "after")
        got = until(seen, lambda c: c == ("ADDED", "after"))
        assert not any(isinstance(c, Listing | Page) for c in got)
        assert not any(isinstance(c, tuple) and c[1].startswith("before") for c in after + got)
        assert int(loop.resource_version or 0) > int(listed_rv)
    finally:
        loop.stop()


def compact(control_plane: ControlPlane, revision: str) -> None:
    """Compact etcd's history up to ``revision`` (what the API server does every 5 minutes)."""
    request = urllib.request.Request(
        f"{control_plane.etcd_url}/v3/kv/compaction", method="POST",
        data=orjson.dumps({"revision": revision, "physical": True}))
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def test_a_version_the_server_no_longer_has_is_listed_again(
        control_plane: ControlPlane, admin: Any, namespace: str, client: Client) -> None:
    # Events have no watch cache: a watch from a compacted version reaches etcd, which no
    # longer has it (configmaps would be answered from the cache's snapshot instead).
    path = f"/api/v1/namespaces/{namespace}/events"
    made = client.request("POST", path, body={
        "metadata": {"name": "there"}, "involvedObject": {"kind": "Pod", "name": "p",
                                                          "namespace": namespace},
        "reason": "Test", "message": "m", "type": "Normal"})
    compact(control_plane, made["metadata"]["resourceVersion"])
    loop = ListWatch(client, path, resource_version="1", backoff=QUICK)
    seen = run(loop)
    try:
        # "1" is compacted away: a 410 (as an answer or as an ERROR line) means list again.
        got = until(seen, lambda c: isinstance(c, Page) and c.last)
        assert Listing("gone") in got, got
        assert any(c.items for c in got if isinstance(c, Page))
    finally:
        loop.stop()


def test_failures_go_to_the_one_error_callback_which_may_end_the_loop(
        control_plane: ControlPlane, namespace: str) -> None:
    alice = connect(str(control_plane.kubeconfig("alice")))  # no rights at all
    errors: list[Exception] = []
    loop = ListWatch(alice, f"/api/v1/namespaces/{namespace}/configmaps",
                     backoff=QUICK, on_error=errors.append)
    seen = run(loop)
    try:
        eventually(lambda: len(errors) >= 3 or None, 20, "retries after the backoff")
        assert all(isinstance(e, KubeError) and e.forbidden for e in errors)
        assert [c for c in list(seen.queue) if not isinstance(c, Listing)] == []
    finally:
        loop.stop()

    def refuse(err: Exception) -> None:
        raise err

    with pytest.raises(KubeError) as raised:
        list(ListWatch(alice, f"/api/v1/namespaces/{namespace}/configmaps", backoff=QUICK,
                       on_error=refuse))
    assert raised.value.forbidden and not raised.value.retryable
    alice.close()


def test_stop_unblocks_a_watch_in_progress(control_plane: ControlPlane, namespace: str,
                                           client: Client) -> None:
    loop = ListWatch(client, f"/api/v1/namespaces/{namespace}/configmaps", watch_timeout=300)
    done = threading.Event()

    def pump() -> None:
        for _ in loop:
            pass
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    # The watch's response is open (the loop keeps it to shut it down): a read blocks there.
    eventually(lambda: loop._resp, 20, "the watch to open")
    started = time.monotonic()
    loop.stop()
    assert done.wait(5), "the loop did not end"
    assert time.monotonic() - started < 5


def test_a_cli_follow_ends_on_a_refusal_with_its_one_line_error(
        control_plane: ControlPlane, namespace: str) -> None:
    from tidings.cli.common import EXIT_FORBIDDEN
    from tidings.cli.kube import Action, ApiError
    from tidings.cli.kube import connect as cli_connect

    k = cli_connect(str(control_plane.kubeconfig("alice")), None, namespace)  # no rights
    loop = k.list_watch(f"/api/v1/namespaces/{namespace}/configmaps", {},
                        action=Action("watch", "configmaps", namespace))
    deadline = time.monotonic() + 20
    with pytest.raises(ApiError) as raised:
        for _ in loop:  # only a failure that may pass is retried: a refusal is final
            assert time.monotonic() < deadline, "the refusal was retried"
    assert raised.value.forbidden and raised.value.code == EXIT_FORBIDDEN
    assert raised.value.message == f"forbidden: cannot watch configmaps in namespace {namespace}"
    k.close()
