"""The bus contract's addresses are the literal strings the API server, the RBAC in deploy/
and the admission policy know: a change here is a wire change, so it must fail a test."""

from __future__ import annotations

from tidings.schemas.wire.contract import (
    BUS_SELECTOR,
    EVENTS_RESOURCE,
    SENDER_POLICY_BINDING_PATH,
    SENDER_POLICY_PATH,
    TASKFEEDBACK_RESOURCE,
    TERMINAL_PHASES,
    events_path,
    lease_path,
    lineage_selector,
    pod_selector,
    task_selector,
    taskfeedback_body,
    taskfeedback_path,
)


def test_paths() -> None:
    assert events_path("ns") == "/apis/events.k8s.io/v1/namespaces/ns/events"
    assert events_path() == events_path("") == "/apis/events.k8s.io/v1/events"
    assert taskfeedback_path("ns") == \
        "/apis/tidings.dev/v1alpha1/namespaces/ns/taskfeedbacks"
    assert taskfeedback_path("ns", "t") == \
        "/apis/tidings.dev/v1alpha1/namespaces/ns/taskfeedbacks/t"
    assert taskfeedback_path() == "/apis/tidings.dev/v1alpha1/taskfeedbacks"
    assert lease_path("ns", "w") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/w"
    assert SENDER_POLICY_PATH.endswith("/validatingadmissionpolicies/tidings-sender-identity")
    assert SENDER_POLICY_BINDING_PATH == ("/apis/admissionregistration.k8s.io/v1/"
                                          "validatingadmissionpolicybindings/"
                                          "tidings-sender-identity")
    assert taskfeedback_path("ns", "t", "status") == \
        "/apis/tidings.dev/v1alpha1/namespaces/ns/taskfeedbacks/t/status"


def test_the_taskfeedback_body_for_a_create_and_for_a_status_write() -> None:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}
    assert taskfeedback_body("ns", "t", labels={"a": "b"}, owner_references=[ref]) == {
        "apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
        "metadata": {"name": "t", "namespace": "ns", "labels": {"a": "b"},
                     "ownerReferences": [ref]},
        "spec": {"task": "t"}}
    # A status write carries the version it replaces and no spec (the API server keeps it).
    assert taskfeedback_body("ns", "t", resource_version="7", status={"phase": "Running"}) == {
        "apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
        "metadata": {"name": "t", "namespace": "ns", "resourceVersion": "7"},
        "status": {"phase": "Running"}}


def test_selectors_and_names() -> None:
    assert BUS_SELECTOR == "reportingController=tidings.dev/bus"
    assert task_selector("t") == \
        "reportingController=tidings.dev/bus,regarding.kind=TaskFeedback,regarding.name=t"
    assert lineage_selector("a") == \
        "reportingController=tidings.dev/bus,reason=PodSpawned,regarding.name=a"
    assert pod_selector("t") == "tidings.dev/task=t"
    assert (EVENTS_RESOURCE, TASKFEEDBACK_RESOURCE) == \
        ("events.events.k8s.io", "taskfeedbacks.tidings.dev")
    assert frozenset({"Succeeded", "Failed"}) == TERMINAL_PHASES


def test_the_deployed_rbac_names_the_same_resources() -> None:
    from pathlib import Path

    text = "\n".join(p.read_text() for p in (Path(__file__).parents[2] / "deploy").glob("*.yaml"))
    assert "taskfeedbacks" in text and "events.k8s.io" in text and "tidings.dev/bus" in text
