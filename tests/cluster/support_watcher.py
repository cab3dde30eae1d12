"""Support for the watcher's cluster tests: emitter processes, the watcher process, expectations.

Run as a script, this module is an emitter process: it POSTs bus events built with
schemas.build_event (sequential seqs for one instance) and appends every delivered event
(201, or 409 = already delivered) to a JSONL file, from which the tests compute the exact
expected fold. It retries through API-server outages, so nothing it records is lost.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
TIDINGS = REPO_ROOT / ".venv" / "bin" / "tidings"
PYTHON = REPO_ROOT / ".venv" / "bin" / "python"


# --- payloads and the emitter process --------------------------------------------------


def payload_for(seq: int, count: int) -> Any:
    from tidings.schemas.wire.payloads import DeckReady, LogLink, Progress, SpanSummary

    kind = seq % 4
    if seq == count:
        return Progress(fraction=1.0, message="done", final=True)
    if kind == 0:
        return LogLink(name=f"link-{seq % 7}", url=f"https://logs.example/{seq}")
    if kind == 1:
        return DeckReady(name=f"deck-{seq % 3}", uri=f"s3://decks/{seq}.html")
    if kind == 2:
        return SpanSummary(name=f"span-{seq % 5}", count=1 + seq % 3, total_s=0.25 * (1 + seq % 3),
                           min_s=0.25, max_s=0.25, first_start=1000.0 + seq,
                           last_end=1001.0 + seq, errors=seq % 2)
    return Progress(fraction=round(seq / count, 4), message=f"step {seq}")


def emit_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--pod", required=True, help="name:uid of the sending pod")
    ap.add_argument("--instance", required=True)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--total", type=int, default=0, help="final seq (terminal progress)")
    ap.add_argument("--rate", type=float, default=0.0, help="events/s (0: as fast as possible)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--proof", action="store_true",
                    help="stamp the sender proof (the kubeconfig holds the pod's bound token)")
    a = ap.parse_args(argv)

    from tidings.kube import KubeError, connect
    from tidings.schemas.wire.event import PodRef, TaskRef, build_event

    kube = connect(a.kubeconfig)
    pod_name, pod_uid = a.pod.split(":", 1)
    task = TaskRef(a.namespace, a.task)
    path = f"/apis/events.k8s.io/v1/namespaces/{a.namespace}/events"
    total = a.total or (a.first + a.count - 1)
    t0 = time.monotonic()
    with open(a.out, "a") as out:
        for i, seq in enumerate(range(a.first, a.first + a.count)):
            if a.rate:
                delay = t0 + i / a.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            body = build_event(task=task, pod=PodRef(pod_name, pod_uid, a.namespace),
                               payload=payload_for(seq, total), instance=a.instance, seq=seq,
                               time=datetime.now(UTC), sender_proof=a.proof)
            deadline = time.monotonic() + 120
            while True:
                try:
                    kube.request("POST", path, body=body, timeout=(2, 10))
                    break
                except KubeError as e:
                    if e.status == 409:
                        break  # a retried create that already landed counts as delivered
                    if not e.retryable or time.monotonic() > deadline:
                        print(f"emit {seq} failed: {e}", file=sys.stderr)
                        return 1
                    time.sleep(0.2)
            out.write(json.dumps(body) + "\n")
            out.flush()
    return 0


class Emitter:
    """One emitter process for one (task, pod, instance)."""

    def __init__(self, kubeconfig: Path, namespace: str, task: str, pod: dict[str, str],
                 instance: str, out: Path, count: int, *, first: int = 1, total: int = 0,
                 rate: float = 0.0, proof: bool = False) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [str(PYTHON), __file__, "--kubeconfig", str(kubeconfig), "--namespace", namespace,
             "--task", task, "--pod", f"{pod['name']}:{pod['uid']}", "--instance", instance,
             "--first", str(first), "--count", str(count), "--total", str(total),
             "--rate", str(rate), "--out", str(out), *(["--proof"] if proof else [])],
            cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout: float = 120) -> None:
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, f"emitter failed: {err}"

    def delivered(self) -> int:
        return len(self.out.read_text().splitlines()) if self.out.exists() else 0


def emitted_events(files: Iterable[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in files:
        if f.exists():
            out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def unjudged(status: Any) -> Any:
    """A status without what depends on when it was judged: silence (the Stalled condition)
    and ``health`` (its ``evaluatedAt`` is the time of the write). Two writes of one fold,
    or a write and the fold computed here, differ only there."""
    if not isinstance(status, dict):
        return status
    out = {k: v for k, v in status.items() if k != "health"}
    if "conditions" in out:
        out["conditions"] = [c for c in out["conditions"] if c.get("type") != "Stalled"]
    return out


def expected_status(namespace: str, task: str, bodies: list[dict[str, Any]],
                    admin: Any) -> dict[str, Any]:
    """The status the watcher must write: the fold of exactly these events, each with the
    creationTimestamp the API server gave it (the fold bounds eventTime and compacts dedup
    entries by it, so the watcher's status carries it); its records read into their fields,
    as ``task_status`` reads the written one."""
    from kubernetes import client

    from tidings.schemas.engine.folding import fold_all
    from tidings.schemas.wire.event import ParsedEvent, TaskRef, parse_event
    from tidings.watcher.writer import status_body

    ref = TaskRef(namespace, task)
    listed = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector="reportingController=tidings.dev/bus", _preload_content=False)
    created = {e["metadata"]["name"]: e["metadata"]["creationTimestamp"]
               for e in json.loads(listed.data)["items"]}
    for b in bodies:
        if b["metadata"]["name"] in created:
            b["metadata"] = {**b["metadata"], "creationTimestamp": created[b["metadata"]["name"]]}
    parsed = [parse_event(b) for b in bodies]
    assert all(isinstance(p, ParsedEvent) for p in parsed), parsed
    mine = [p for p in parsed if isinstance(p, ParsedEvent) and p.task == ref]
    from tests.support import expanded

    return expanded(status_body(fold_all(ref, mine)))


# --- the watcher process ---------------------------------------------------------------


class WatcherProc:
    """`tidings watcher run` as a subprocess; knows its HTTP port once started."""

    def __init__(self, kubeconfig: Path, namespace: str, log: Path, *extra: str,
                 env: dict[str, str] | None = None, leader: bool = False) -> None:
        args = [str(TIDINGS), "watcher", "run", "--kubeconfig", str(kubeconfig),
                "-n", namespace, "--metrics-host", "127.0.0.1", "--metrics-port", "0",
                "--write-interval", "0.2", "--concurrency", "4"]
        if not leader:
            args.append("--no-leader-elect")
        self.log = log
        self._err = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([*args, *extra], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                     stderr=self._err, env={**os.environ, **(env or {})},
                                     text=True)
        self.port = 0
        self.lines: list[str] = []  # stdout, as text (the message of a --log-format json line)
        self.raw_lines: list[str] = []
        # A reader thread, not select() on the pipe: two lines that arrive together would
        # leave the second in the file object's buffer, where select() cannot see it.
        self._seen = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ok = self.wait_line("http on", 60)
        line = next((x for x in self.lines if "http on" in x), "")
        assert ok, f"watcher did not start: {line!r} {self.tail()}"
        self.port = int(line.rsplit(":", 1)[1])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._seen:
                self.raw_lines.append(raw.strip())
                self.lines.append(_message(raw.strip()))
                self._seen.notify_all()
        with self._seen:
            self._eof = True
            self._seen.notify_all()

    def said(self, text: str) -> int:
        """How many stdout lines so far contain ``text``."""
        with self._seen:
            return sum(text in x for x in self.lines)

    def wait_line(self, text: str, timeout: float, count: int = 1) -> bool:
        """Wait until ``count`` stdout lines contain ``text`` (False on timeout or exit)."""
        def enough() -> bool:
            return sum(text in x for x in self.lines) >= count

        with self._seen:
            self._seen.wait_for(lambda: enough() or self._eof, timeout)
            return enough()

    def wait_leading(self, timeout: float, count: int = 1) -> bool:
        return self.wait_line("leading as", timeout, count)

    def get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def metrics(self) -> dict[str, float]:
        """Samples as {'name{label="v"}': value} (and bare names for unlabelled series)."""
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(self.get("/metrics")[1].decode()):
            for s in fam.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(5)  # every stdout line is in self.lines now
        self._err.close()

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-n:])
        except OSError:
            return ""


def _message(line: str) -> str:
    """A stdout line's text: itself, or with --log-format json the message it carries."""
    if line.startswith("{"):
        try:
            return str(json.loads(line)["message"])
        except (ValueError, KeyError, TypeError):
            pass
    return line


# --- the API and etcd ------------------------------------------------------------------


def task_status(admin: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The TaskFeedback's status with its records read into their fields (``expanded``: what
    the tests look into); None when there is none. ``raw_task_status`` is the status as
    stored, for a test that writes it back."""
    from tests.support import expanded  # (not at the top: this module also runs as a script)

    status = raw_task_status(admin, namespace, name)
    return None if status is None else expanded(status)


def raw_task_status(admin: Any, namespace: str, name: str) -> dict[str, Any] | None:
    from kubernetes import client

    try:
        obj = client.CustomObjectsApi(admin).get_namespaced_custom_object(
            "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", name)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return obj.get("status")


def etcd_post(etcd_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"{etcd_url}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def etcd_compact_now(etcd_url: str) -> int:
    """Bump etcd's revision, then compact physically at the current revision."""
    b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    etcd_post(etcd_url, "/v3/kv/put", {"key": b64("/tidings-test/bump"), "value": b64("x")})
    rev = int(etcd_post(etcd_url, "/v3/kv/range", {"key": b64("/tidings-test/bump")})
              ["header"]["revision"])
    etcd_post(etcd_url, "/v3/kv/compaction", {"revision": rev, "physical": True})
    return rev


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    sys.exit(emit_main(sys.argv[1:]))
