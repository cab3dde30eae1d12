"""tidings.kube against the real API server: kubectl's kubeconfig semantics (client
certificates, tls-server-name, proxy-url, insecure-skip-tls-verify, impersonation,
KUBECONFIG merging), pagination, errors, and exec credentials renewed on expiry and on 401."""

from __future__ import annotations

import base64
import select
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from kubernetes import client as k8s

from tests.support import eventually
from tidings.kube import Client, ClusterConfig, ConfigError, Impersonation, KubeError, connect, load
from tidings.kube.auth import NoAuth
from tools.devcluster import ControlPlane


def kubeconfig(path: Path, server: str, user: dict[str, Any], *, cluster: dict[str, Any],
               namespace: str = "", name: str = "c") -> Path:
    ctx: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        ctx["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server, **cluster}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": ctx}]}))
    return path


def ca_cluster(cp: ControlPlane) -> dict[str, Any]:
    return {"certificate-authority": str(cp.ca_file)}


def test_token_kubeconfig_namespace_pagination_and_errors(control_plane: ControlPlane,
                                                          admin: Any, namespace: str,
                                                          tmp_path: Path) -> None:
    cfg = kubeconfig(tmp_path / "kc", control_plane.server,
                     {"token": control_plane.tokens["admin"]}, cluster=ca_cluster(control_plane),
                     namespace=namespace)
    kube = connect(str(cfg))
    assert kube.namespace == namespace
    for i in range(5):
        kube.request("POST", f"/api/v1/namespaces/{namespace}/configmaps",
                     body={"metadata": {"name": f"cm-{i}"}})
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    pages = list(kube.pages(path, limit=2))
    assert [len(p["items"]) for p in pages] == [2, 2, 1]
    items, rv = kube.list_all(path, limit=2)
    assert sorted(i["metadata"]["name"] for i in items) == [f"cm-{i}" for i in range(5)]
    assert rv
    with pytest.raises(KubeError) as err:
        kube.get(f"{path}/nosuch")
    assert (err.value.status, err.value.reason, err.value.retryable) == (404, "NotFound", False)
    with pytest.raises(KubeError) as err:
        kube.request("POST", path, body={"metadata": {"name": "cm-0"}})
    assert (err.value.status, err.value.reason) == (409, "AlreadyExists")
    assert connect(str(cfg), namespace="other").namespace == "other"


def test_connection_refused_is_status_0_and_retryable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    cfg = kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", {"token": "x"},
                     cluster={"insecure-skip-tls-verify": True})
    with pytest.raises(KubeError) as err:
        connect(str(cfg)).get("/version")
    assert err.value.status == 0 and err.value.retryable
    assert "connection refused" in str(err.value)


def mint_client_cert(cp: ControlPlane, d: Path, user: str, group: str) -> tuple[Path, Path]:
    pki = cp.ca_file.parent
    key, csr, crt = d / f"{user}.key", d / f"{user}.csr", d / f"{user}.crt"
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
                    "-out", str(csr), "-subj", f"/O={group}/CN={user}"],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(cp.ca_file),
                    "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-out", str(crt),
                    "-days", "1"], check=True, capture_output=True)
    return crt, key


def whoami(kube: Client) -> dict[str, Any]:
    review = kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          body={"apiVersion": "authentication.k8s.io/v1",
                                "kind": "SelfSubjectReview"})
    return dict(review["status"]["userInfo"])


def test_client_certificates_from_files_and_data(control_plane: ControlPlane,
                                                 tmp_path: Path) -> None:
    crt, key = mint_client_cert(control_plane, tmp_path, "carol", "tidings:certs")
    # Relative paths resolve against the kubeconfig's own directory, as kubectl does.
    sub = tmp_path / "conf"
    sub.mkdir()
    (sub / "carol.crt").write_bytes(crt.read_bytes())
    (sub / "carol.key").write_bytes(key.read_bytes())
    files = kubeconfig(sub / "kc", control_plane.server,
                       {"client-certificate": "carol.crt", "client-key": "carol.key"},
                       cluster=ca_cluster(control_plane))
    assert whoami(connect(str(files)))["username"] == "carol"
    data = kubeconfig(tmp_path / "kc-data", control_plane.server, {
        "client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key.read_bytes()).decode()}, cluster={
        "certificate-authority-data":
            base64.b64encode(control_plane.ca_file.read_bytes()).decode()})
    info = whoami(connect(str(data)))
    assert info["username"] == "carol" and "tidings:certs" in info["groups"]
    assert not list(Path("/tmp").glob("tidings-tls-*"))  # key material never left behind


def test_tls_server_name_is_what_the_certificate_is_checked_against(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    token = {"token": control_plane.tokens["admin"]}
    localhost = control_plane.server.replace("127.0.0.1", "localhost")
    ok = kubeconfig(tmp_path / "ok", localhost, token, cluster={
        **ca_cluster(control_plane), "tls-server-name": "kubernetes.default.svc"})
    assert connect(str(ok)).get("/version")["major"]
    bad = kubeconfig(tmp_path / "bad", control_plane.server, token, cluster={
        **ca_cluster(control_plane), "tls-server-name": "not-the-apiserver.example"})
    with pytest.raises(KubeError) as err:
        connect(str(bad)).get("/version")
    assert err.value.status == 0 and "TLS" in str(err.value)


def test_insecure_skip_tls_verify_and_an_unknown_ca(control_plane: ControlPlane,
                                                    tmp_path: Path) -> None:
    token = {"token": control_plane.tokens["admin"]}
    insecure = kubeconfig(tmp_path / "a", control_plane.server, token,
                          cluster={"insecure-skip-tls-verify": True})
    assert connect(str(insecure)).get("/version")["major"]
    unknown = kubeconfig(tmp_path / "b", control_plane.server, token, cluster={})
    with pytest.raises(KubeError) as err:  # system CAs only: the dev CA is not among them
        connect(str(unknown)).get("/version")
    assert err.value.status == 0 and "TLS" in str(err.value)


class ConnectProxy(threading.Thread):
    """An HTTP CONNECT proxy on loopback that counts the tunnels it opened."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.tunnels: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        target = head.split(b" ")[1].decode()
        self.tunnels.append(target)
        host, port = target.rsplit(":", 1)
        up = socket.create_connection((host, int(port)))
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        socks = [conn, up]
        while True:
            readable, _, _ = select.select(socks, [], [], 30)
            if not readable:
                break
            for s in readable:
                data = s.recv(65536)
                if not data:
                    conn.close()
                    up.close()
                    return
                (up if s is conn else conn).sendall(data)


@pytest.fixture
def connect_proxy() -> Iterator[ConnectProxy]:
    p = ConnectProxy()
    p.start()
    yield p
    p.sock.close()


def test_proxy_url_tunnels_through_the_proxy(control_plane: ControlPlane, tmp_path: Path,
                                             connect_proxy: ConnectProxy) -> None:
    cfg = kubeconfig(tmp_path / "kc", control_plane.server,
                     {"token": control_plane.tokens["admin"]},
                     cluster={**ca_cluster(control_plane), "proxy-url": connect_proxy.url})
    kube = connect(str(cfg))
    assert kube.get("/version")["major"]
    assert connect_proxy.tunnels == [control_plane.server.removeprefix("https://")]


def test_impersonation_sends_every_group(control_plane: ControlPlane, namespace: str,
                                         tmp_path: Path) -> None:
    cfg = kubeconfig(tmp_path / "kc", control_plane.server,
                     {"token": control_plane.tokens["admin"]}, cluster=ca_cluster(control_plane))
    path = f"/api/v1/namespaces/{namespace}/secrets"
    as_alice = connect(str(cfg), impersonate=Impersonation(user="alice"))
    with pytest.raises(KubeError) as err:
        as_alice.get(path)
    assert err.value.status == 403
    # Two groups: only if both arrive as separate headers is system:masters among them.
    both = connect(str(cfg), impersonate=Impersonation(
        user="alice", groups=("tidings:devs", "system:masters")))
    assert both.get(path)["items"] == []
    assert sorted(whoami(both)["groups"]) == ["system:authenticated", "system:masters",
                                              "tidings:devs"]


def test_kubeconfig_list_merges_like_kubectl(control_plane: ControlPlane, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    a.mkdir()
    # The first file to define a name wins; the first current-context wins.
    kubeconfig(a / "kc", control_plane.server, {"token": control_plane.tokens["alice"]},
               cluster={"certificate-authority": "ca.crt"}, namespace="from-a", name="dev")
    (a / "ca.crt").write_bytes(control_plane.ca_file.read_bytes())
    kubeconfig(b / "kc", "https://127.0.0.1:1", {"token": "wrong"},
               cluster={}, namespace="from-b", name="dev")
    doc = yaml.safe_load((b / "kc").read_text())
    doc["current-context"] = "other"
    (b / "kc").write_text(yaml.safe_dump(doc))
    before = {p: p.read_bytes() for p in (a / "kc", b / "kc")}
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{a / 'kc'}:{b / 'kc'}")
    kube = connect()
    assert kube.namespace == "from-a" and whoami(kube)["username"] == "alice"
    with pytest.raises(ConfigError, match="'nosuch' is not in the kubeconfig"):
        load(context="nosuch")
    assert {p: p.read_bytes() for p in before} == before


# --- exec credentials ----------------------------------------------------------------------

PLUGIN = textwrap.dedent('''\
    import datetime, json, os, pathlib, sys
    state = pathlib.Path(sys.argv[1])
    tokens = json.loads(state.read_text())
    info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    assert info["spec"]["interactive"] is False and info["spec"]["cluster"]["server"]
    token, ttl = tokens.pop(0)
    state.write_text(json.dumps(tokens))
    with open(str(state) + ".runs", "a") as runs:
        runs.write("run\\n")
    status = {"token": token}
    if ttl is not None:
        expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl)
        status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1",
                      "kind": "ExecCredential", "status": status}))
''')


CONFIGMAP_READER = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]


def service_account_tokens(admin: Any, namespace: str, secrets: list[str],
                           rules: list[dict[str, Any]] = CONFIGMAP_READER) -> list[str]:
    """Short-lived (600 s) tokens of a ServiceAccount with ``rules``, each bound to its own
    Secret so deleting the Secret revokes that token at once."""
    core, rbac = k8s.CoreV1Api(admin), k8s.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "reader"}, "rules": rules})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    out = []
    for name in secrets:
        uid = core.create_namespaced_secret(namespace, {"metadata": {"name": name}}).metadata.uid
        review = core.create_namespaced_service_account_token("reader", namespace, {"spec": {
            "expirationSeconds": 600,
            "boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": name, "uid": uid}}})
        out.append(str(review.status.token))
    return out


def exec_kubeconfig(cp: ControlPlane, d: Path, tokens: list[tuple[str, int | None]]) -> Path:
    (d / "plugin.py").write_text(PLUGIN)
    (d / "tokens.json").write_text(orjson.dumps(tokens).decode())
    return kubeconfig(d / "kc", cp.server, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(d / "plugin.py"), str(d / "tokens.json")], "interactiveMode": "Never",
        "provideClusterInfo": True}}, cluster=ca_cluster(cp))


def revoked(cp: ControlPlane, token: str) -> bool:
    probe = Client(ClusterConfig(server=cp.server, ca_file=str(cp.ca_file),
                                 auth=NoAuth(f"Bearer {token}")))
    try:
        probe.get("/apis")
    except KubeError as e:
        return e.status == 401
    return False


def test_exec_credentials_are_renewed_on_expiry_and_on_401(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path) -> None:
    first, second, third = service_account_tokens(admin, namespace, ["s1", "s2", "s3"])
    cfg = exec_kubeconfig(control_plane, tmp_path, [(first, 2), (second, None), (third, None)])
    before = cfg.read_bytes()
    kube = connect(str(cfg))
    auth = kube.config.auth
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    assert kube.get(path)["items"] == [] and auth.runs == 1  # type: ignore[attr-defined]

    # The first token says it expires in 2 s: once it has, the next request runs the plugin.
    eventually(lambda: kube.get(path) is not None and auth.runs == 2,  # type: ignore[attr-defined]
               15, "the plugin to be run again after expirationTimestamp")
    assert kube.get(path)["items"] == [] and auth.runs == 2  # type: ignore[attr-defined]

    # The second token has no expiry; revoke it: the 401 re-runs the plugin and the same
    # request goes through with the third token.
    k8s.CoreV1Api(admin).delete_namespaced_secret("s2", namespace)
    eventually(lambda: revoked(control_plane, second), 30, "the second token to be revoked")
    assert kube.get(path)["items"] == [] and auth.runs == 3  # type: ignore[attr-defined]
    assert cfg.read_bytes() == before  # never written back
