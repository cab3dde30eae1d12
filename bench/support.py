"""Pieces the cluster benchmarks share: a process's CPU from /proc, percentiles, one event
create that rides out a busy API server, and the watcher as a subprocess (``tidings watcher
run`` with its HTTP port read from stdout)."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from tidings.kube import Client, KubeError
from tidings.schemas.contract import events_path

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def post_event(kube: Client, ns: str, body: dict[str, Any], pause: float = 0.1) -> bool:
    """Create one bus event, retried while the API server is overloaded (50 tries); an
    AlreadyExists (a retry of a create that landed) counts as created."""
    for _ in range(50):
        try:
            kube.request("POST", events_path(ns), body=body, timeout=(5, 30))
            return True
        except KubeError as e:
            if e.status == 409:
                return True
            time.sleep(pause)
    return False


class Watcher:
    """One watcher for namespace ``ns``, no leader election, logs to ``log`` (``exe``: the
    ``tidings`` of another checkout, for a baseline)."""

    def __init__(self, kubeconfig: str, ns: str, log: Path, flags: list[str] | None = None,
                 exe: Path | None = None) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [str(exe or REPO / ".venv/bin/tidings"), "watcher", "run", "--kubeconfig", kubeconfig,
             "-n", ns, "--no-leader-elect", "--metrics-host", "127.0.0.1", "--metrics-port",
             "0", "--log-level", "WARNING", *(flags or [])],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline().strip().rsplit(":", 1)[1])

    def metrics(self) -> dict[str, float]:
        """Samples as {'name{labels}': value}."""
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read()
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def ready(self) -> bool:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                          timeout=5).status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()
