"""`tidings ui` under attack (requests from another site, a page
exposed beyond loopback, streams without end), on the real API server: what
the server process holds (threads, file descriptors, resident memory) and what the API
server answers for it, for this checkout's `tidings` and, with ``--before VENV``, another
checkout's, in the same run on the same plane.

  idle     one task whose kwok pod has logs, no tab; its API requests over the window
  attack   200 event streams of tasks that do not exist, opened as a hostile page opens
           them (Origin https://evil.example, Sec-Fetch-Site cross-site) and held open for
           the window: how many the server served (200) or refused, its figures at the end,
           its API requests (LIST and GET of events, pods, taskfeedbacks) over the window
  drained  the same figures, ``--drain`` seconds (60) after the streams closed, and the
           requests of the window that ends then
  flood    one stream of a task whose pod, once the stream follows it, prints a tqdm bar
           redrawn 20,000 times and 30 lines of 2 MB (kwok follows the log file, as a
           kubelet): the largest message the stream sent, all it sent, and the server's
           memory once the last line arrived

Run: ``TIDINGS_BIN_DIR=... .venv/bin/python bench/bench_ui_attack.py [--before VENV]``
(``--window S``, 20 by default; ``--smoke``: a few streams, the figures meaningless).
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support import (  # bench/support.py
    REPO,
    add_control_plane_arg,
    control_plane,
    load_averages,
    training_status,
)

from tidings.kube import MERGE_PATCH, Client, connect
from tidings.schemas.wire.contract import pods_path, taskfeedback_path

NS = f"bench-attack-{os.getpid()}"  # (a plane of `tidings dev up` may be measured twice)
EVIL = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site",
        "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
COUNTED = ('resource="events"', 'resource="pods"', 'resource="taskfeedbacks"')


def log_line(text: str, chunk: int = 16 * 1024) -> str:
    """One log line as a container runtime writes it in the CRI format: partial (P) entries
    of ``chunk`` bytes, then the last (F)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    parts = [text[i:i + chunk] for i in range(0, len(text), chunk)] or [""]
    return "".join(f"{stamp} stdout {'F' if i == len(parts) - 1 else 'P'} {p}\n"
                   for i, p in enumerate(parts))


def kwok_pod(admin: Client, name: str, task: str, log: Path) -> None:
    """A pod of ``task`` on the kwok node, its container's log served from ``log``."""
    admin.request("POST", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{NS}/logs", body={
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"logs": [{"containers": ["main"], "logsFile": str(log), "follow": True}]}})
    admin.request("POST", pods_path(NS), body={
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"tidings.dev/task": task}},
        "spec": {"nodeName": "kwok-node-0",
                 "containers": [{"name": "main", "image": "busybox"}]}})


class Server:
    """`tidings ui -n NS --port 0 --no-browser` of one venv, as a child process."""

    def __init__(self, exe: str, kubeconfig: str) -> None:
        self.proc = subprocess.Popen([exe, "ui", "-n", NS, "--port", "0", "--no-browser",
                                      "--kubeconfig", kubeconfig],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = self.proc.stdout.readline()  # type: ignore[union-attr]
        self.host = first.split()[3].removeprefix("http://").rstrip("/")

    def figures(self) -> dict[str, int]:
        pid = self.proc.pid
        rss = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if x.startswith("VmRSS:"))
        return {"threads": len(list(Path(f"/proc/{pid}/task").iterdir())),
                "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
                "rss_mib": int(rss.split()[1]) // 1024}

    def open(self, path: str, headers: dict[str, str]) -> tuple[http.client.HTTPConnection,
                                                                 http.client.HTTPResponse]:
        conn = http.client.HTTPConnection(self.host, timeout=120)
        conn.request("GET", path, headers=headers)
        return conn, conn.getresponse()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


def api_requests(admin: Client) -> int:
    """LIST and GET requests of events, pods and taskfeedbacks the API server answered."""
    text = admin.open("GET", "/metrics", accept="text/plain").data.decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and any(c in line for c in COUNTED) \
                and ('verb="LIST"' in line or 'verb="GET"' in line):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def flood_lines(count: int) -> str:
    bar = "".join(f"\r{p / 200:5.1f}%|{'#' * (p // 2000):10s}| {p}/20000" for p in range(20001))
    return (log_line(bar) + "".join(log_line(f"dump {i} " + "x" * 2_000_000)
                                    for i in range(count))
            + log_line("step 2 after the flood"))


def read_until(resp: http.client.HTTPResponse, text: bytes) -> tuple[int, int]:
    """Read an event stream up to the line holding ``text``: (largest line, bytes read)."""
    largest = sent = 0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = resp.fp.readline()
        if not line:
            break
        sent += len(line)
        largest = max(largest, len(line))
        if text in line:
            break
    return largest, sent


def measure(exe: str, kubeconfig: str, admin: Client, streams: int, window: float,
            drain: float, flood: tuple[str, Path, int]) -> dict[str, Any]:
    server = Server(exe, kubeconfig)
    out: dict[str, Any] = {}
    try:
        time.sleep(3)  # listed, settled
        out["idle"] = server.figures()
        r0 = api_requests(admin)
        time.sleep(window)
        out["idle"]["requests"] = api_requests(admin) - r0
        held, served = [], 0
        r0 = api_requests(admin)
        for i in range(streams):
            conn, resp = server.open(f"/tasks/{NS}/ghost-{i}/events", EVIL)
            served += resp.status == 200
            held.append(conn)
        time.sleep(window)
        out["attack"] = {**server.figures(), "requests": api_requests(admin) - r0,
                         "served": served}
        for conn in held:
            conn.close()
        time.sleep(max(0.0, drain - window))
        r0 = api_requests(admin)
        time.sleep(window)
        out["drained"] = {**server.figures(), "requests": api_requests(admin) - r0}
        task, log, lines = flood
        conn, resp = server.open(f"/tasks/{NS}/{task}/events", {})
        read_until(resp, b"step 1")
        with log.open("a") as f:
            f.write(flood_lines(lines))
        largest, sent = read_until(resp, b"step 2 after the flood")
        conn.close()
        out["flood"] = {**server.figures(), "largest": largest, "sent": sent}
    finally:
        server.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_control_plane_arg(ap)
    ap.add_argument("--before", metavar="VENV", help="another checkout's venv, measured too")
    ap.add_argument("--window", type=float, default=20.0, help="seconds of each window")
    ap.add_argument("--drain", type=float, default=60.0,
                    help="seconds after the attack's streams closed for the drained figures")
    args = ap.parse_args()
    streams, window, drain = (10, 2.0, 2.0) if args.smoke else (200, args.window, args.drain)
    print(f"load before: {load_averages()}")
    with control_plane(args.control_plane, prefix="bench-attack-") as cp:
        kubeconfig = str(cp.kubeconfig("admin"))
        admin = connect(kubeconfig)
        admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
        # (no controller manager here makes a namespace's default ServiceAccount)
        admin.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts",
                      body={"metadata": {"name": "default"}})
        logs = Path(tempfile.mkdtemp(prefix="bench-attack-"))
        names = ("train", "flood-0", "flood-1")
        for name in names:
            (logs / f"{name}.log").write_text(log_line("step 1"))
        for name in names:
            admin.request("POST", taskfeedback_path(NS), body={
                "apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
                "metadata": {"name": name, "namespace": NS}, "spec": {"task": name}})
            admin.request("PATCH", taskfeedback_path(NS, name, "status"), body={
                "status": training_status(NS, name, 0.4, "epoch 2", datetime.now(UTC))},
                content_type=MERGE_PATCH)
            kwok_pod(admin, f"{name}-0", name, logs / f"{name}.log")
        runs = [("after", str(REPO / ".venv" / "bin" / "tidings"))]
        if args.before:
            runs.insert(0, ("before", str(Path(args.before) / "bin" / "tidings")))
        results = {label: measure(exe, kubeconfig, admin, streams, window, drain,
                                  (f"flood-{i}", logs / f"flood-{i}.log", 3 if args.smoke else 30))
                   for i, (label, exe) in enumerate(runs)}
    print(f"load after: {load_averages()}; {streams} cross-site streams, {window:g} s "
          f"windows, drained {drain:g} s after")
    head = f"{'':8s}{'':9s}" + "".join(f"{label:>14s}" for label, _ in runs)
    print(head)
    rows = [("idle", "threads"), ("idle", "fds"), ("idle", "rss_mib"), ("idle", "requests"),
            ("attack", "served"), ("attack", "threads"), ("attack", "fds"),
            ("attack", "rss_mib"), ("attack", "requests"), ("drained", "threads"),
            ("drained", "fds"), ("drained", "rss_mib"), ("drained", "requests"),
            ("flood", "largest"), ("flood", "sent"), ("flood", "rss_mib")]
    for phase, key in rows:
        print(f"{phase:8s}{key:9s}" + "".join(f"{results[label][phase][key]:>14,}"
                                              for label, _ in runs))


if __name__ == "__main__":
    main()
