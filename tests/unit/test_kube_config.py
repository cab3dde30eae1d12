"""tidings.kube without a cluster: kubectl's loading rules, credentials sources, the error
type and the line splitter."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tidings.kube import ConfigError, KubeError, iter_line_batches, iter_lines, load
from tidings.kube import config as kube_config
from tidings.kube.auth import CredentialError, ExecAuth, ExecConfig, NoAuth, TokenFileAuth


def write(path: Path, *, contexts: dict[str, dict[str, Any]], clusters: dict[str, Any],
          users: dict[str, Any], current: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": k, "cluster": v} for k, v in clusters.items()],
        "users": [{"name": k, "user": v} for k, v in users.items()],
        "contexts": [{"name": k, "context": v} for k, v in contexts.items()]}
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


ENV: dict[str, str] = {"HOME": "/nonexistent"}


def test_first_file_wins_per_name_and_paths_resolve_against_their_file(tmp_path: Path) -> None:
    a = write(tmp_path / "a" / "config", current="", contexts={
        "dev": {"cluster": "c", "user": "u", "namespace": "from-a"}},
        clusters={"c": {"server": "https://a.example:6443/", "certificate-authority": "ca.crt",
                        "tls-server-name": "api.a", "proxy-url": "http://proxy.a:3128"}},
        users={"u": {"client-certificate": "u.crt", "client-key": "/abs/u.key",
                     "as": "alice", "as-groups": ["g1", "g2"]}})
    b = write(tmp_path / "b" / "config", current="dev", contexts={
        "dev": {"cluster": "c", "user": "u", "namespace": "from-b"},
        "other": {"cluster": "c", "user": "u"}},
        clusters={"c": {"server": "https://b.example"}}, users={"u": {"token": "b"}})
    env = {**ENV, "KUBECONFIG": f"{tmp_path / 'missing'}:{a}::{b}"}
    cfg = load(env=env)
    assert cfg.server == "https://a.example:6443" and cfg.namespace == "from-a"
    assert cfg.ca_file == str(tmp_path / "a" / "ca.crt")
    assert (cfg.cert_file, cfg.key_file) == (str(tmp_path / "a" / "u.crt"), "/abs/u.key")
    assert (cfg.tls_server_name, cfg.proxy_url) == ("api.a", "http://proxy.a:3128")
    assert cfg.impersonate is not None and cfg.impersonate.headers() == [
        ("Impersonate-User", "alice"), ("Impersonate-Group", "g1"), ("Impersonate-Group", "g2")]
    assert load(context="other", env=env).namespace == "default"
    assert load(context="other", namespace="ns", env=env).namespace == "ns"
    with pytest.raises(ConfigError, match="'nope' is not in the kubeconfig"):
        load(context="nope", env=env)
    with pytest.raises(ConfigError, match="does not exist"):
        load(str(tmp_path / "absent"), env=env)


def one(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    return write(tmp_path / "kc", current="x", contexts={"x": {"cluster": "c", "user": "u"}},
                 clusters={"c": {"server": "https://k.example", **(cluster or {})}},
                 users={"u": user})


def test_a_token_wins_over_exec_and_commands_with_a_path_resolve(tmp_path: Path) -> None:
    exec_ = {"apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/plugin"}
    cfg = load(str(one(tmp_path, {"token": "t", "exec": exec_})), env=ENV)
    assert isinstance(cfg.auth, NoAuth) and cfg.auth.header() == "Bearer t"
    cfg = load(str(one(tmp_path, {"exec": exec_})), env=ENV)
    assert isinstance(cfg.auth, ExecAuth)
    assert cfg.auth.config.command == str(tmp_path / "bin" / "plugin")
    cfg = load(str(one(tmp_path, {"exec": {**exec_, "command": "gke-gcloud-auth-plugin"}})),
               env=ENV)
    assert cfg.auth.config.command == "gke-gcloud-auth-plugin"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="apiVersion"):
        load(str(one(tmp_path, {"exec": {**exec_, "apiVersion": "v0"}})), env=ENV)


def test_auth_providers_are_refused_except_a_read_only_oidc_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="auth-provider 'gcp' is not supported"):
        load(str(one(tmp_path, {"auth-provider": {"name": "gcp"}})), env=ENV)
    cfg = load(str(one(tmp_path, {"auth-provider": {"name": "oidc",
                                                    "config": {"id-token": "jwt"}}})), env=ENV)
    assert cfg.auth.header() == "Bearer jwt"


def test_environment_proxies_are_resolved_once_like_go(tmp_path: Path) -> None:
    path = str(one(tmp_path, {"token": "t"}))
    env = {**ENV, "HTTPS_PROXY": "http://proxy:3128"}
    assert load(path, env=env).proxy_url == "http://proxy:3128"
    assert load(path, env={**env, "NO_PROXY": ".example"}).proxy_url is None
    local = str(one(tmp_path, {"token": "t"}, {"server": "https://127.0.0.1:6443"}))
    assert load(local, env=env).proxy_url is None  # loopback never goes through a proxy


def test_in_cluster_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "namespace").write_text("ml")
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    env = {**ENV, "KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = load(env=env)
    assert (cfg.server, cfg.namespace, cfg.source) == ("https://[fd00::1]:443", "ml",
                                                       "in-cluster")
    assert cfg.auth.header() == "Bearer tok"
    assert load(env={**env, "POD_NAMESPACE": "pod-ns"}).namespace == "pod-ns"
    with pytest.raises(ConfigError, match="no cluster configured"):
        load(env=ENV)


def test_token_files_are_re_read_when_they_change(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("one")
    auth = TokenFileAuth(str(f), check_s=0.0)
    assert auth.header() == "Bearer one"
    f.write_text("two-longer")
    assert auth.header() == "Bearer two-longer"
    f.write_text("")  # caught half-written: keep the last good token
    assert auth.header() == "Bearer two-longer"
    f.write_text("three")
    assert auth.refresh("Bearer two-longer") is True and auth.header() == "Bearer three"
    assert auth.refresh("Bearer three") is False
    with pytest.raises(CredentialError):
        TokenFileAuth(str(tmp_path / "absent"))


def plugin(tmp_path: Path, output: str) -> ExecAuth:
    script = tmp_path / "plugin.py"
    script.write_text(textwrap.dedent(f"""\
        import json, os, sys
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        open(sys.argv[1], "a").write(json.dumps(info) + "\\n")
        sys.stdout.write({output!r})
        """))
    return ExecAuth(ExecConfig(command=sys.executable,
                               args=(str(script), str(tmp_path / "seen")),
                               api_version="client.authentication.k8s.io/v1beta1",
                               env=(("EXTRA", "1"),), provide_cluster_info=True,
                               interactive_mode="Never",
                               cluster_info={"server": "https://k.example"}))


def test_exec_plugins_get_exec_info_and_their_expiry_is_read(tmp_path: Path) -> None:
    auth = plugin(tmp_path, '{"apiVersion": "client.authentication.k8s.io/v1beta1", '
                            '"kind": "ExecCredential", "status": {"token": "tok", '
                            '"expirationTimestamp": "2000-01-01T00:00:00.123456789Z"}}')
    assert auth.header() == "Bearer tok"
    assert auth.header() == "Bearer tok" and auth.runs == 2  # expired long ago: run again
    info = [yaml.safe_load(line) for line in (tmp_path / "seen").read_text().splitlines()]
    assert info[0] == {"apiVersion": "client.authentication.k8s.io/v1beta1",
                       "kind": "ExecCredential",
                       "spec": {"interactive": False, "cluster": {"server": "https://k.example"}}}


@pytest.mark.parametrize(("output", "message"), [
    ("not json", "no ExecCredential JSON"),
    ('{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
     '"status": {"token": "x"}}', "returned client.authentication.k8s.io/v1"),
    ('{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}',
     "no status"),
    ('{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", '
     '"status": {"clientCertificateData": "c"}}', "only one of certificate and key"),
    ('{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", '
     '"status": {"token": "x", "expirationTimestamp": "tomorrow"}}', "bad expirationTimestamp"),
])
def test_bad_plugin_output_is_one_clear_error(tmp_path: Path, output: str, message: str) -> None:
    with pytest.raises(CredentialError, match=message):
        plugin(tmp_path, output).header()


def test_a_missing_plugin_names_its_install_hint() -> None:
    auth = ExecAuth(ExecConfig(command="/nonexistent/plugin", api_version="v",
                               install_hint="brew install it"))
    with pytest.raises(CredentialError, match=r"not found \(brew install it\)"):
        auth.header()


def test_errors_carry_the_status_reason_and_retry_after() -> None:
    e = KubeError.from_response(429, b'{"kind":"Status","reason":"TooManyRequests",'
                                     b'"message":"slow down"}', "2")
    assert (e.status, e.reason, e.message, e.retry_after, e.retryable) == (
        429, "TooManyRequests", "slow down", 2.0, True)
    assert str(e) == "HTTP 429 TooManyRequests: slow down"
    e = KubeError.from_response(502, b"<html>bad gateway</html>", None, "Bad Gateway")
    assert (e.reason, e.message, e.retryable) == ("", "<html>bad gateway</html>", True)
    assert not KubeError.from_response(409, b"{}", None, "Conflict").retryable


class Chunked:
    chunked = True

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: int | None = None) -> Iterator[bytes]:
        return iter(self.chunks)


@given(st.lists(st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")), max_size=8),
       st.booleans(), st.data())
def test_lines_survive_any_chunking(lines: list[bytes], trailing: bool, data: st.DataObject
                                    ) -> None:
    blob = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blob)), max_size=6)))
    chunks = [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=False)]
    got = list(iter_lines(Chunked(chunks)))  # type: ignore[arg-type]
    want = blob.split(b"\n")
    if want and want[-1] == b"":
        want.pop()
    assert got == want
    assert list(iter_lines(Chunked(chunks), skip_empty=True)) == [w for w in want if w]  # type: ignore[arg-type]
    # Batches: the same lines, one non-empty list per chunk that completed any.
    batches = list(iter_line_batches(Chunked(chunks), skip_empty=True))  # type: ignore[arg-type]
    assert [x for b in batches for x in b] == [w for w in want if w]
    assert all(batches) and len(batches) <= len(chunks) + 1


@pytest.mark.parametrize(("stamp", "epoch"), [
    ("2000-01-01T00:00:00Z", 946684800.0),
    ("2000-01-01T00:00:00.5Z", 946684800.5),
    ("2000-01-01T00:00:00.123456789Z", 946684800.123456),  # microseconds are kept
    ("2000-01-01t00:00:00Z", 946684800.0),  # RFC 3339 allows a lowercase "t" ...
    ("2000-01-01 00:00:00Z", 946684800.0),  # ... and a space
    ("2000-01-01T01:00:00+01:00", 946684800.0),
    ("2000-01-01T00:00:00", 946684800.0),  # no zone: UTC
])
def test_an_expiry_is_read_by_the_one_rfc3339_reader(stamp: str, epoch: float) -> None:
    from tidings.kube.auth import _rfc3339

    assert _rfc3339(stamp, "plugin") == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize("stamp", ["tomorrow", "2000-01-01T00:00:00z", "2000-13-01T00:00:00Z"])
def test_an_expiry_the_reader_refuses_is_one_clear_error(stamp: str) -> None:
    from tidings.kube.auth import _rfc3339

    with pytest.raises(CredentialError, match="bad expirationTimestamp"):
        _rfc3339(stamp, "plugin")
