"""Zero wiring, the emitter's half: identity from the
service-account token's claims, the sender proof only for the token's own pod, a fact about
the pod itself when no task id is known, truthful flush(), clamped worker counts."""

from __future__ import annotations

import base64
import logging
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit import test_emitter_core
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.kube.auth import BoundPod, bound_pod
from tidings.schemas.wire.constants import SENDER_UID_ANNOTATION, WORKERS_MAX
from tidings.schemas.wire.event import parse_event
from tidings.schemas.wire.payloads import LogLink, Progress
from tidings.schemas.wire.rejection import Rejection

POD = BoundPod("ml", "train-7-0-abcde", "6f1c2d3e-0000-4000-8000-000000000001")


def jwt(claims: dict[str, Any]) -> str:
    def part(obj: Any) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(obj)).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'kid': 'k'})}.{part(claims)}.c2lnbmF0dXJl"


def pod_token(pod: BoundPod = POD) -> str:
    """The claims a projected (or TokenRequest, pod-bound) service-account token carries."""
    return jwt({"aud": ["https://kubernetes.default.svc"], "exp": 2_000_000_000,
                "iss": "https://kubernetes.default.svc", "sub": f"system:serviceaccount:"
                f"{pod.namespace}:worker", "kubernetes.io": {
                    "namespace": pod.namespace, "pod": {"name": pod.name, "uid": pod.uid},
                    "serviceaccount": {"name": "worker", "uid": "sa-uid"}}})


class Recorder(test_emitter_core.Recorder):
    """The core tests' recording transport with a token: what a KubeTransport holds, minus
    the network."""

    def __init__(self, bound: BoundPod | None, pod_bound: bool | None = None) -> None:
        super().__init__()
        self.bound_pod = bound
        self.pod_bound = pod_bound


# --- the token's claims ---------------------------------------------------------------------


def test_a_pod_bound_token_names_its_pod() -> None:
    assert bound_pod(f"Bearer {pod_token()}") == POD


@pytest.mark.parametrize("header", [
    None, "", "Basic dXNlcjpwdw==", "Bearer opaque-static-token", "Bearer a.b.c",
    # A legacy secret's token, and a TokenRequest bound to a Secret: a service account, no pod.
    "Bearer " + jwt({"iss": "kubernetes/serviceaccount",
                     "kubernetes.io/serviceaccount/namespace": "ml"}),
    "Bearer " + jwt({"kubernetes.io": {"namespace": "ml", "secret": {"name": "s", "uid": "u"}}}),
    "Bearer " + jwt({"kubernetes.io": {"namespace": "ml", "pod": {"name": "", "uid": "u"}}}),
    "Bearer " + jwt({"kubernetes.io": {"namespace": 7, "pod": {"name": "p", "uid": "u"}}}),
    "Bearer " + jwt(["not", "an", "object"]),
])
def test_a_token_bound_to_no_pod_names_none(header: str | None) -> None:
    assert bound_pod(header) is None


@given(st.text(max_size=300))
def test_any_header_is_read_without_raising(text: str) -> None:
    assert bound_pod(text) is None or isinstance(bound_pod(text), BoundPod)
    assert bound_pod("Bearer " + text) is None or isinstance(bound_pod("Bearer " + text),
                                                             BoundPod)


def test_the_environment_overrides_the_token_and_is_never_mixed_with_it() -> None:
    assert Identity().completed_by(POD) == Identity(POD.namespace, POD.name, POD.uid)
    assert Identity(namespace="other", task="t").completed_by(POD) == Identity(
        "other", POD.name, POD.uid, "t")
    # The env names another pod: its name is never paired with the token's uid.
    assert Identity(pod_name="someone-else").completed_by(POD) == Identity(
        POD.namespace, "someone-else", "")
    assert Identity(pod_uid="other-uid").completed_by(POD).pod_name == ""
    assert Identity(pod_name=POD.name).completed_by(POD).pod_uid == POD.uid
    assert Identity().completed_by(None) == Identity()


# --- the emitter ----------------------------------------------------------------------------


def test_with_no_env_a_pod_reports_about_itself_with_its_sender_proof() -> None:
    rec = Recorder(POD)
    em = Emitter(EmitterConfig(), identity=Identity(), transport=rec)
    em.log_link("wandb", "https://wandb.ai/r/7")
    em.progress(1.0, "done", final=True)
    assert em.flush(5)
    events = rec.parsed()
    assert [type(e.payload) for e in events] == [LogLink, Progress]
    for body, ev in zip(rec.bodies, events, strict=True):
        assert body["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ml",
                                     "name": POD.name, "uid": POD.uid}
        assert body["related"]["uid"] == POD.uid and body["metadata"]["namespace"] == "ml"
        assert ev.sender_proof == POD.uid and ev.regarding_kind == "Pod"
    em.close(0)


def test_a_task_id_from_the_env_still_addresses_the_taskfeedback() -> None:
    rec = Recorder(POD)
    em = Emitter(EmitterConfig(), identity=Identity(task="run-7"), transport=rec)
    em.log_link("wandb", "https://wandb.ai/r/7")
    assert em.flush(5)
    (ev,) = rec.parsed()
    assert ev.regarding_kind == "TaskFeedback" and ev.task.name == "run-7"
    assert ev.sender.name == POD.name and ev.sender_proof == POD.uid
    em.close(0)


@pytest.mark.parametrize(("identity", "bound", "forced"), [
    (Identity("ml", "a", "uid-a"), None, None),  # a token bound to no pod: never a proof
    (Identity("ml", "a", "uid-a"), POD, None),  # the token is another pod's
    (Identity(), POD, False),  # TIDINGS_SENDER_PROOF=0
])
def test_the_proof_is_stamped_only_for_the_tokens_own_pod(
        identity: Identity, bound: BoundPod | None, forced: bool | None) -> None:
    rec = Recorder(bound, forced)
    em = Emitter(EmitterConfig(), identity=identity, transport=rec)
    em.log_link("wandb", "https://wandb.ai/r/7")
    assert em.flush(5)
    (body,) = rec.bodies
    assert SENDER_UID_ANNOTATION not in body["metadata"]["annotations"]
    em.close(0)


def test_a_process_that_cannot_learn_its_pod_says_so_once_and_flush_says_false(
        caplog: pytest.LogCaptureFixture) -> None:
    em = Emitter(EmitterConfig(), identity=Identity(), transport=Recorder(None))
    with caplog.at_level(logging.WARNING, "tidings.emitter"):
        em.log_link("wandb", "https://wandb.ai/r/7")
        em.progress(1.0, final=True)
        assert not em.flush(5)
    lines = [r.getMessage() for r in caplog.records if "cannot be sent" in r.getMessage()]
    assert lines == ["tidings: events cannot be sent: this process does not know its pod "
                     "(POD_NAMESPACE, POD_NAME, POD_UID not set, and the service-account "
                     "token is bound to no pod); run it in a pod with its service-account "
                     "token mounted, or set them from the downward API"]
    s = em.stats()
    assert (s["unaddressable"], s["delivered"]) == (2, 0)
    em.close(0)


def test_a_loss_fails_the_flush_that_covers_it_and_no_later_one() -> None:
    rec = Recorder(POD)
    em = Emitter(EmitterConfig(), identity=Identity(), transport=rec)
    em.log_link("bad", "javascript:alert(1)")
    assert not em.flush(5)
    em.log_link("good", "https://wandb.ai/r/7")
    assert em.flush(5)
    assert em.flush(5)  # nothing new: still true
    em.close(0)


# --- TIDINGS_EMIT_WORKERS (the emitter's half) ------------------------------


def test_an_out_of_range_worker_count_is_clamped_with_one_line_and_fail_still_sends(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "tidings.emitter"):
        cfg = EmitterConfig.from_env({"TIDINGS_EMIT_WORKERS": "20000"})
    assert cfg.workers == WORKERS_MAX
    assert [r.getMessage() for r in caplog.records] == [
        "tidings: TIDINGS_EMIT_WORKERS=20000 is above the largest value the bus accepts "
        "(10000); using 10000"]
    rec = Recorder(POD)
    em = Emitter(cfg, identity=Identity(task="run-7"), transport=rec)
    em.progress(0.5, "half")
    em.fail("CUDA out of memory")
    assert em.flush(5)
    progress = [f for e in rec.parsed() for f in test_emitter_core.unpack(e.payload)]
    assert [p.workers for p in progress] == [WORKERS_MAX, WORKERS_MAX]
    em.close(0)


def test_a_worker_count_made_in_code_is_clamped_too() -> None:
    assert EmitterConfig(workers=10**9).workers == WORKERS_MAX


@pytest.mark.parametrize("raw", ["-3", "many", "nan", "1e3"])
def test_a_bad_env_value_is_ignored_with_one_line(raw: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "tidings.emitter"):
        cfg = EmitterConfig.from_env({"TIDINGS_EMIT_WORKERS": raw, "TIDINGS_EMIT_RATE": "x"})
    assert (cfg.workers, cfg.rate) == (0, EmitterConfig().rate)
    assert len(caplog.records) == 2 and all(
        "is not a non-negative number; ignored" in r.getMessage() for r in caplog.records)


# --- the contract: a fact about a pod is about the sender's own pod --------------------------


def test_a_fact_about_another_pod_is_refused_by_the_parser() -> None:
    rec = Recorder(POD)
    em = Emitter(EmitterConfig(), identity=Identity(), transport=rec)
    em.log_link("wandb", "https://wandb.ai/r/7")
    assert em.flush(5)
    (body,) = rec.bodies
    for field, value in (("name", "victim-0"), ("uid", "victim-uid")):
        forged = orjson.loads(orjson.dumps(body))
        forged["regarding"][field] = value
        verdict = parse_event(forged)
        assert isinstance(verdict, Rejection) and verdict.reason.value == "bad_regarding", \
            verdict
    em.close(0)
