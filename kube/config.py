"""Where the cluster is and who we are: kubeconfig with kubectl's loading rules, or the pod's
in-cluster service account. Reads files only; never writes the user's kubeconfig.

kubectl's rules, as client-go's clientcmd implements them:

- ``--kubeconfig FILE`` alone (it must exist), else every file of ``$KUBECONFIG`` (missing
  ones skipped), else ``~/.kube/config``; when none gives a context and the process runs in a
  pod, the in-cluster service account.
- Merging several files, the first file to define a cluster, user or context name wins, and
  so does the first ``current-context``.
- Relative paths (CA, client certificate and key, ``tokenFile``, an exec command containing a
  ``/``) are relative to the file that defined the stanza.
- A ``token``/``tokenFile`` (or basic auth) in the user wins over its ``exec`` plugin.
- The namespace is ``-n``, else the context's, else ``default`` (in a pod: the service
  account's namespace).
"""

from __future__ import annotations

import base64
import ipaddress
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .auth import (
    EXEC_API_VERSIONS,
    Auth,
    ExecAuth,
    ExecConfig,
    NoAuth,
    TokenFileAuth,
    basic,
    bearer,
)
from .errors import ConfigError

# The pod's service account (a module constant so tests can point it elsewhere).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Impersonation:
    """kubectl's ``--as``, ``--as-group`` (repeatable), ``--as-uid`` and user extras."""

    user: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def headers(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.user:
            out.append(("Impersonate-User", self.user))
        if self.uid:
            out.append(("Impersonate-Uid", self.uid))
        out.extend(("Impersonate-Group", g) for g in self.groups)
        for key, values in self.extra:
            out.extend((f"Impersonate-Extra-{key}", v) for v in values)
        return out


@dataclass(frozen=True)
class ClusterConfig:
    """Everything needed to talk to one API server as one identity."""

    server: str
    namespace: str = "default"
    auth: Auth = field(default_factory=NoAuth)
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    impersonate: Impersonation | None = None
    #: Where this came from, for messages: "context NAME" or "in-cluster".
    source: str = ""


def load(kubeconfig: str | None = None, context: str | None = None, *,
         namespace: str | None = None, impersonate: Impersonation | None = None,
         env: Mapping[str, str] | None = None) -> ClusterConfig:
    """The cluster config kubectl would use with these flags. Raises ConfigError."""
    env = os.environ if env is None else env
    files = kubeconfig_files(kubeconfig, env)
    merged = _merge(files) if files else None
    if merged is None or not (context or merged.current):
        if in_cluster_possible(env) and not context and kubeconfig is None:
            return in_cluster(namespace=namespace, impersonate=impersonate, env=env)
        if merged is None:
            raise ConfigError(f"no cluster configured: {no_kubeconfig_reason(env)}")
        raise ConfigError("no cluster configured: the kubeconfig has no current context "
                          "(use --context)")
    return merged.resolve(context, namespace=namespace, impersonate=impersonate, env=env)


def no_kubeconfig_reason(env: Mapping[str, str] | None = None) -> str:
    """Why no kubeconfig was read, naming what was looked for: a KUBECONFIG that names only
    missing files is a typo to show, not a reason to say "set KUBECONFIG"."""
    env = os.environ if env is None else env
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        shown = ", ".join(repr(p) for p in listed[:3]) + (", ..." if len(listed) > 3 else "")
        # KUBECONFIG=/dev/null (or an empty file) is there and names no cluster: no typo.
        missing = sum(not Path(p).expanduser().exists() for p in listed)
        if missing == len(listed):
            verb = "which does not exist" if len(listed) == 1 else "none of which exist"
        elif missing == 0:
            verb = "which holds no cluster" if len(listed) == 1 else "which hold no cluster"
        else:
            verb = "which hold no cluster or do not exist"
        return f"KUBECONFIG names {shown}, {verb} (and not running in a pod)"
    return ("no kubeconfig found (set KUBECONFIG or --kubeconfig; ~/.kube/config does not "
            "exist) and not running in a pod")


def kubeconfig_files(explicit: str | None = None,
                     env: Mapping[str, str] | None = None) -> list[Path]:
    """The files kubectl would read, in precedence order."""
    env = os.environ if env is None else env
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"kubeconfig {explicit!r} "
                              + ("is not a file" if path.exists() else "does not exist"))
        return [path]
    listed = env.get("KUBECONFIG", "")
    if listed:
        seen: list[Path] = []
        for p in listed.split(os.pathsep):
            path = Path(p).expanduser()
            if p and path not in seen and path.is_file():
                seen.append(path)
        return seen
    default = Path(env.get("HOME") or Path.home()) / ".kube" / "config"
    return [default] if default.is_file() else []


def current_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace the user means without -n (the context's, or the pod's), or "default"."""
    return load(kubeconfig, context).namespace


def in_cluster_possible(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return bool(env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT")
                and os.path.isfile(os.path.join(SERVICE_ACCOUNT_DIR, "token")))


def in_cluster(*, namespace: str | None = None, impersonate: Impersonation | None = None,
               env: Mapping[str, str] | None = None) -> ClusterConfig:
    """The pod's service account: its projected token (re-read as the kubelet rotates it),
    CA and namespace."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("not running in a pod: KUBERNETES_SERVICE_HOST/PORT are not set")
    if ":" in host:
        host = f"[{host}]"
    sa = Path(SERVICE_ACCOUNT_DIR)
    ns = namespace or env.get("POD_NAMESPACE", "")
    if not ns:
        try:
            ns = (sa / "namespace").read_text().strip()
        except OSError:
            ns = ""
    ca = sa / "ca.crt"
    return ClusterConfig(
        server=f"https://{host}:{port}", namespace=ns or "default",
        auth=TokenFileAuth(str(sa / "token")), ca_file=str(ca) if ca.is_file() else None,
        impersonate=impersonate, proxy_url=env_proxy(f"https://{host}:{port}", env),
        source="in-cluster")


def env_proxy(server: str, env: Mapping[str, str]) -> str | None:
    """The proxy ``$HTTPS_PROXY``/``$HTTP_PROXY`` name for ``server`` (``$NO_PROXY`` and
    loopback excepted, as Go's ProxyFromEnvironment does), resolved once, not per request."""
    url = urlsplit(server)
    host = url.hostname or ""
    if host == "localhost" or _is_loopback(host):
        return None
    proxies = {k[:-6].lower(): v for k, v in env.items()
               if k.lower().endswith("_proxy") and v}
    if not proxies or urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
            host, proxies):
        return None
    return proxies.get(url.scheme) or None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- kubeconfig ----------------------------------------------------------------------------


@dataclass
class _Stanza:
    body: dict[str, Any]
    base: Path  # the directory of the file that defined it


@dataclass
class _Merged:
    clusters: dict[str, _Stanza] = field(default_factory=dict)
    users: dict[str, _Stanza] = field(default_factory=dict)
    contexts: dict[str, _Stanza] = field(default_factory=dict)
    current: str = ""

    def resolve(self, context: str | None, *, namespace: str | None,
                impersonate: Impersonation | None, env: Mapping[str, str]) -> ClusterConfig:
        name = context or self.current
        if name not in self.contexts:
            raise ConfigError(f"context {name!r} is not in the kubeconfig")
        ctx = self.contexts[name].body
        cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
        if cluster_name not in self.clusters:
            raise ConfigError(f"context {name!r} names cluster {cluster_name!r}, which is not "
                              "in the kubeconfig")
        cl = self.clusters[cluster_name]
        c = cl.body
        server = str(c.get("server") or "").rstrip("/")
        if not server:
            raise ConfigError(f"cluster {cluster_name!r} has no server")
        us = self.users.get(user_name) or _Stanza({}, cl.base)
        u = us.body
        ca_data = _b64(c.get("certificate-authority-data"), "certificate-authority-data")
        proxy = str(c.get("proxy-url") or "") or env_proxy(server, env)
        cert_data = _b64(u.get("client-certificate-data"), "client-certificate-data")
        key_data = _b64(u.get("client-key-data"), "client-key-data")
        return ClusterConfig(
            server=server,
            namespace=namespace or str(ctx.get("namespace") or "") or "default",
            auth=_auth(u, us.base, user_name, c, ca_data, server),
            ca_file=None if ca_data else _path(c.get("certificate-authority"), cl.base),
            ca_data=ca_data,
            insecure=bool(c.get("insecure-skip-tls-verify")),
            tls_server_name=str(c.get("tls-server-name") or "") or None,
            proxy_url=proxy or None,
            cert_file=None if cert_data else _path(u.get("client-certificate"), us.base),
            key_file=None if key_data else _path(u.get("client-key"), us.base),
            cert_data=cert_data, key_data=key_data,
            impersonate=_impersonation(u, impersonate),
            source=f"context {name}")


def _where(err: Exception) -> str:
    """PyYAML's error as one line a person can act on: 'line 3, column 7: <problem>'."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or getattr(err, "context", None) or type(err).__name__
    if mark is None:
        return str(problem)
    # PyYAML counts from 0; editors and kubectl count from 1.
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _merge(files: list[Path]) -> _Merged:
    import yaml  # only kubeconfig users pay for it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = _Merged()
    for f in files:
        try:
            doc = yaml.load(f.read_text(), Loader=loader) or {}
        except OSError as e:
            raise ConfigError(f"cannot read kubeconfig {str(f)!r}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"kubeconfig {str(f)!r} is not valid YAML: {_where(e)}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {str(f)!r} is not a mapping")
        base = f.resolve().parent
        for kind, key, table in (("clusters", "cluster", out.clusters),
                                 ("users", "user", out.users),
                                 ("contexts", "context", out.contexts)):
            for item in doc.get(kind) or []:
                if isinstance(item, dict) and isinstance(item.get("name"), str) \
                        and item["name"] not in table:
                    body = item.get(key) or {}
                    table[item["name"]] = _Stanza(body if isinstance(body, dict) else {}, base)
        if not out.current and doc.get("current-context"):
            out.current = str(doc["current-context"])
    return out


def _b64(value: Any, what: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=False)
    except ValueError:
        raise ConfigError(f"kubeconfig {what} is not base64") from None


def _path(value: Any, base: Path) -> str | None:
    if not value:
        return None
    return str(base / Path(str(value)).expanduser())


def _auth(u: dict[str, Any], base: Path, user: str, cluster: dict[str, Any],
          ca_data: bytes | None, server: str) -> Auth:
    if u.get("tokenFile"):
        return TokenFileAuth(str(_path(u["tokenFile"], base)))
    if u.get("token"):
        return NoAuth(bearer(str(u["token"])))
    if u.get("username") and u.get("password"):
        return NoAuth(basic(str(u["username"]), str(u["password"])))
    if isinstance(u.get("exec"), dict):
        return ExecAuth(_exec_config(u["exec"], base, user, cluster, ca_data, server))
    provider = u.get("auth-provider")
    if isinstance(provider, dict):
        pname = str(provider.get("name") or "")
        pconf = provider.get("config") or {}
        if pname == "oidc" and isinstance(pconf, dict) and pconf.get("id-token"):
            # Read-only: refreshing would mean writing the new token into the user's file.
            return NoAuth(bearer(str(pconf["id-token"])))
        raise ConfigError(f"user {user!r}: auth-provider {pname!r} is not supported (client-go "
                          "removed it too); use its exec credential plugin")
    return NoAuth()


def _exec_config(e: dict[str, Any], base: Path, user: str, cluster: dict[str, Any],
                 ca_data: bytes | None, server: str) -> ExecConfig:
    command = str(e.get("command") or "")
    if not command:
        raise ConfigError(f"user {user!r}: exec has no command")
    if os.sep in command and not os.path.isabs(command):
        command = str(base / command)  # kubectl resolves only commands with a path in them
    api_version = str(e.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(f"user {user!r}: exec apiVersion {api_version!r} is not one of "
                          f"{', '.join(EXEC_API_VERSIONS)}")
    env = tuple((str(x.get("name")), str(x.get("value", ""))) for x in e.get("env") or []
                if isinstance(x, dict) and x.get("name"))
    info: dict[str, Any] = {"server": server}
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url",
                "disable-compression"):
        if cluster.get(key):
            info[key] = cluster[key]
    if ca_data:
        info["certificate-authority-data"] = base64.b64encode(ca_data).decode()
    ext = {x.get("name"): x.get("extension") for x in cluster.get("extensions") or []
           if isinstance(x, dict)}
    if ext.get("client.authentication.k8s.io/exec") is not None:
        info["config"] = ext["client.authentication.k8s.io/exec"]
    return ExecConfig(
        command=command, api_version=api_version,
        args=tuple(str(a) for a in e.get("args") or []), env=env,
        install_hint=str(e.get("installHint") or ""),
        provide_cluster_info=bool(e.get("provideClusterInfo")),
        interactive_mode=str(e.get("interactiveMode") or "IfAvailable"), cluster_info=info)


def _impersonation(u: dict[str, Any], flags: Impersonation | None) -> Impersonation | None:
    """The user's ``as``/``as-uid``/``as-groups``/``as-user-extra``, each overridden by a flag."""
    extra = u.get("as-user-extra") or {}
    conf = Impersonation(
        user=str(u.get("as") or ""), uid=str(u.get("as-uid") or ""),
        groups=tuple(str(g) for g in u.get("as-groups") or []),
        extra=tuple((str(k), tuple(str(x) for x in (v or []))) for k, v in extra.items())
        if isinstance(extra, dict) else ())
    if flags is not None:
        conf = Impersonation(user=flags.user or conf.user, uid=flags.uid or conf.uid,
                             groups=flags.groups or conf.groups, extra=flags.extra or conf.extra)
    return conf if conf.headers() else None
