"""A long `tidings logs -f` with an exec credential plugin outlives its short-lived tokens:
the plugin is re-run when a token's expirationTimestamp passes and when the API server
answers 401 to a revoked one, and the stream keeps delivering lines throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.cluster.support_cli import Proc, assert_harmless, record_spawn
from tests.cluster.test_cli_lineage import _pod, _running
from tests.cluster.test_kube_client import exec_kubeconfig, revoked, service_account_tokens
from tests.support import cri_log_line, eventually
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

LOG_READER = [
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["tidings.dev"], "resources": ["taskfeedbacks"],
     "verbs": ["get", "list", "watch"]},
]


class _Kubeconfig:
    """Stands in for the ControlPlane in Proc: every identity is this kubeconfig."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def kubeconfig(self, user: str = "") -> Path:
        return self.path


def test_logs_follow_outlives_expiring_and_revoked_exec_tokens(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path) -> None:
    tokens = service_account_tokens(admin, namespace, ["s1", "s2", "s3", "s4"], LOG_READER)
    # The first token says it expires 3 s from now; the second has no expiry (only a 401
    # can retire it); the rest are spares.
    cfg = exec_kubeconfig(control_plane, tmp_path,
                          [(tokens[0], 3), (tokens[1], None), (tokens[2], None),
                           (tokens[3], None)])
    runs = tmp_path / "tokens.json.runs"
    # labelled for the app: a spawned pod confirms its lineage record
    pod = _pod(admin, namespace, "w-0", tmp_path, ["line one"],
               labels={"tidings.dev/task": "app-x"})
    record_spawn(admin, namespace, "app-x", pod["name"], pod["uid"], 0)
    _running(admin, namespace, "w-0")

    p = Proc(_Kubeconfig(cfg), "logs", "app-x", "-f", "-n", namespace)  # type: ignore[arg-type]
    try:
        p.wait_for(lambda out: "[w-0/main] line one" in out, 30, "the first line")
        # The CLI checks on its pods every 2 s while following: past the first token's
        # expiry, one of those requests runs the plugin again.
        eventually(lambda: runs.read_text().count("run") >= 2, 30,
                   "the plugin to run again after expirationTimestamp")
        with pod["log"].open("a") as f:
            f.write(cri_log_line("line two"))
        p.wait_for(lambda out: "[w-0/main] line two" in out, 30, "a line after the expiry")

        # Revoke the second token (it has no expiry): only the 401 can make the CLI renew.
        k8s.CoreV1Api(admin).delete_namespaced_secret("s2", namespace)
        eventually(lambda: revoked(control_plane, tokens[1]), 30, "the token to be revoked")
        eventually(lambda: runs.read_text().count("run") >= 3, 30,
                   "the plugin to run again after a 401")
        with pod["log"].open("a") as f:
            f.write(cri_log_line("line three"))
        p.wait_for(lambda out: "[w-0/main] line three" in out, 30, "a line after the 401")
        assert p.proc.poll() is None, p.err
    finally:
        assert p.stop() in (0, 130), p.err
    assert runs.read_text().count("run") == 3  # once, on expiry, on the 401: no more
    assert p.out.count("[w-0/main] line one") == 1
    assert not [e for e in p.err if "unauthorized" in e or "error" in e], p.err
    assert_harmless("\n".join(p.out))
