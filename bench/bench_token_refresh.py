"""Prove once that the emitter and the watcher outlive their token (a token is a
time-bound truth): on a real node, a workload pod and a watcher pod each mount a projected
service-account token of the shortest life the API allows (600 s), which the kubelet
replaces at 80 % of it (480 s). The workload reports every --every seconds for --minutes; the
watcher (the image from deploy/Dockerfile, as its chart runs it, with this short token
instead of the default one) folds the reports. Past 600 s the first tokens are expired: every
report after that is one sent, and folded and written, with a token the kubelet refreshed.

Prints: each token's lifetimes and when the kubelet replaced it (read by the pods from the
mounted file), reports sent and folded before and after the first token's expiry, and the
load. Takes --minutes (11 by default). Needs root and `make node images`.

Run: ``TIDINGS_BIN_DIR=... .venv/bin/python bench/bench_token_refresh.py``. Not a test.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from support import (  # bench/support.py
    REPO,
    add_control_plane_arg,
    delete_namespace,
    load_averages,
    real_node_plane,
    workload_namespace,
)

from tidings.kube import KubeError, connect
from tidings.schemas.status.decoder import expanded
from tidings.schemas.wire.contract import taskfeedback_path

NEEDS_REAL_NODE = True
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The token the kubelet refreshes: 600 s is the least the API server issues.
TOKEN_LIFE = 600
# What the restricted Pod Security level of tidings-system asks of a container.
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}

WORKLOAD = f"""
import json, base64, os, sys, time
from tidings import emitter as tidings
every, total = float(sys.argv[1]), int(sys.argv[2])
seen = None
for i in range(1, total + 1):
    token = open("{SA_DIR}/token").read()
    if token != seen:
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        print(json.dumps({{"token": i, "iat": claims["iat"], "exp": claims["exp"],
                          "at": time.time()}}), flush=True)
        seen = token
    tidings.progress(i / (total + 1), f"report {{i}} at {{time.time():.0f}}")
    tidings.metric("report", i, step=i)
    time.sleep(every)
tidings.progress(1.0, "done", final=True)
print(json.dumps({{"flushed": tidings.flush(30), "stats": tidings.stats()}}), flush=True)
"""


def short_token_volume() -> dict[str, Any]:
    """What the ServiceAccount admission plugin mounts, with a 600 s token instead of 3607."""
    return {"name": "short-token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_LIFE}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt",
                                                              "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "fieldPath": "metadata.namespace"}}]}}]}}


def pod(name: str, account: str, image: str, command: list[str],
        labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": "Never", "serviceAccountName": account,
                     "automountServiceAccountToken": False,
                     "volumes": [short_token_volume()],
                     "containers": [{"name": "main", "image": image,
                                     "imagePullPolicy": "IfNotPresent", "command": command,
                                     "securityContext": RESTRICTED,
                                     "volumeMounts": [{"name": "short-token",
                                                       "mountPath": SA_DIR}]}]}}


def log_of(kube: Any, ns: str, name: str) -> str:
    """A pod's log, as the kubelet serves it through the API server."""
    return bytes(kube.open("GET", f"/api/v1/namespaces/{ns}/pods/{name}/log").data).decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_control_plane_arg(ap)
    ap.add_argument("--minutes", type=float, default=11.0)
    ap.add_argument("--every", type=float, default=15.0)
    a = ap.parse_args()
    if a.smoke:
        a.minutes, a.every = 0.2, 2.0
    before = load_averages()
    with real_node_plane(a.control_plane, "bench-token-") as (cp, _):
        rows = run(cp, a)
    print(f"# token refresh on the real node: load before {before}, after {load_averages()}")
    for line in rows:
        print(line)


def run(cp: Any, a: argparse.Namespace) -> list[str]:
    # The watcher's ServiceAccount and rights, as the base gives them.
    for manifest in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
        cp.kubectl_run("apply", "-f", str(REPO / "deploy" / manifest))
    kube = connect(str(cp.kubeconfig("admin")))
    ns = workload_namespace(cp, kube, "bench-token")
    # The watcher of this namespace as its Deployment runs it, but with the short token.
    watcher = pod("watcher", "tidings-watcher", "tidings-watcher:dev", [
        "tidings", "watcher", "run", "-n", ns, "--no-leader-elect", "--metrics-port", "8080",
        "--coalesce-interval", "1"], {})
    kube.request("POST", "/api/v1/namespaces/tidings-system/pods", body=watcher)
    total = max(1, int(a.minutes * 60 / a.every))
    task = "refresh"
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod(
        "worker", "trainer", "tidings-workload:dev",
        ["python3", "-c", WORKLOAD, str(a.every), str(total)], {"tidings.dev/task": task}))
    started = time.time()
    folded: list[tuple[float, float]] = []  # (when read, the last report folded)
    while True:
        phase = kube.get(f"/api/v1/namespaces/{ns}/pods/worker")["status"].get("phase")
        try:
            status = expanded(kube.get(taskfeedback_path(ns, task)).get("status", {}))
        except KubeError:
            status = {}
        value = status.get("metrics", {}).get("report", {}).get("value")
        if value is not None and (not folded or folded[-1][1] != value):
            folded.append((time.time(), float(value)))
        if phase in ("Succeeded", "Failed") and status.get("phase") in ("Succeeded", "Failed"):
            break
        if time.time() - started > a.minutes * 60 + 300:
            raise SystemExit("the run did not finish in time")
        time.sleep(1)
    lines = [json.loads(x) for x in log_of(kube, ns, "worker").splitlines()
             if x.startswith("{")]
    watcher_log = log_of(kube, "tidings-system", "watcher")
    kube.request("DELETE", "/api/v1/namespaces/tidings-system/pods/watcher",
                 body={"gracePeriodSeconds": 0})
    tokens = [x for x in lines if "token" in x]
    end = next(x for x in lines if "flushed" in x)
    first_exp = tokens[0]["exp"]
    after = [v for t, v in folded if t > first_exp]
    out = [f"{'token':>5} {'issued':>8} {'expires':>8} {'seen':>8} {'replaced at % of life':>22}"]
    for prev, tok in zip([None, *tokens], tokens, strict=False):
        life = tok["exp"] - tok["iat"]
        replaced = "" if prev is None else (
            f"{(tok['at'] - prev['iat']) / (prev['exp'] - prev['iat']) * 100:.0f} %")
        out.append(f"{tok['token']:>5} {tok['iat'] - started:>7.0f}s {life:>7.0f}s "
                   f"{tok['at'] - started:>7.0f}s {replaced:>22}")
    out += [f"reports sent: {total}, delivered: {end['stats'].get('delivered')}, "
            f"flushed: {end['flushed']}, internal errors: "
            f"{end['stats'].get('internal_errors', 0)}",
            f"tokens the workload read: {len(tokens)}; the first expired "
            f"{first_exp - started:.0f}s into the run",
            f"reports folded and written after the first token expired: {len(after)} "
            f"(the last: report {int(folded[-1][1]) if folded else 0} of {total})",
            f"task phase: {status.get('phase')}; watcher errors logged: "
            f"{sum('ERROR' in x or 'Unauthorized' in x for x in watcher_log.splitlines())}"]
    delete_namespace(kube, ns)
    return out


if __name__ == "__main__":
    main()
