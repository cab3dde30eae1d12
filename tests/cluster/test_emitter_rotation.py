"""In-cluster config survives token rotation: the emitter re-reads the projected token file
when it changes, or at the latest on a 401 (tidings.kube's TokenFileAuth).

The kubelet rewrites a pod's token file before the old token expires; here the old token is
revoked outright (its bound Secret is deleted) right after the file is rewritten, so only a
client that re-reads the file can go on delivering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.test_controlplane import client_with_token
from tests.cluster.test_emitter import TASK, parsed_events, workload
from tests.support import eventually
from tidings.emitter import Emitter, EmitterConfig
from tidings.emitter.transport import KubeTransport
from tidings.kube import config as kube_config
from tidings.kube import connect
from tools.devcluster import ControlPlane


def secret_bound_token(admin: Any, namespace: str, secret: str) -> str:
    core = client.CoreV1Api(admin)
    uid = core.create_namespaced_secret(namespace, {"metadata": {"name": secret}}).metadata.uid
    review = core.create_namespaced_service_account_token("emitter", namespace, {"spec": {
        "boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": secret, "uid": uid}}})
    return str(review.status.token)


def test_emitter_follows_a_rotated_token(control_plane: ControlPlane, admin: Any,
                                         namespace: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "emitter"}})
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "events"},
        "rules": [{"apiGroups": ["events.k8s.io"], "resources": ["events"],
                   "verbs": ["create", "list"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "emitter-creates-events"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "events"},
        "subjects": [{"kind": "ServiceAccount", "name": "emitter", "namespace": namespace}]})
    old, new = (secret_bound_token(admin, namespace, s) for s in ("token-old", "token-new"))

    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    token_file = sa_dir / "token"
    token_file.write_text(old)
    (sa_dir / "ca.crt").write_bytes(control_plane.ca_file.read_bytes())
    (sa_dir / "namespace").write_text(namespace)
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_DIR", str(sa_dir))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(control_plane.ports["apiserver"]))

    me = workload(admin, namespace)
    em = Emitter(EmitterConfig(retry_initial_s=0.05, retry_max_s=0.5), identity=me,
                 transport=KubeTransport(connect()))
    em.log_link("before", "https://example.com/before")
    assert em.flush(20) and em.stats()["delivered"] == 1

    token_file.write_text(new)
    core.delete_namespaced_secret("token-old", namespace)
    old_client = client.EventsV1Api(client_with_token(control_plane, old))

    def old_token_revoked() -> bool:
        try:
            old_client.list_namespaced_event(namespace)
        except ApiException as err:
            return err.status == 401
        return False

    eventually(old_token_revoked, 30, "the old token to be revoked")
    em.log_link("after", "https://example.com/after")
    assert em.flush(20)
    assert em.stats()["delivered"] == 2 and em.stats()["refused"] == 0
    links = {e.payload.name for e in parsed_events(admin, namespace) if e.task.name == TASK}
    assert links == {"before", "after"}
    em.close(5)
