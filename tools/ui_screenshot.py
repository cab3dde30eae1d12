"""The picture of `tidings ui` in docs/ui.md, from a real run: a local control plane, deploy/ (CRD,
RBAC, the sender admission policy), the watcher as a process, two kwok pods of a training task
whose programs report with pod-bound tokens (metrics, spans, progress; one worker slower) and
write their logs, then `tidings ui` in headless Chromium, mid-run: taken once the page shows
what a run's page holds, each metric's history drawn (no "one value"), the timeline with a
lane per pod under each span name, and the log tail (a run that does not get there within
``SHOW_WITHIN_S`` fails with what is missing, and writes nothing).

Run, from the checkout, with the control plane's binaries (kube-apiserver, etcd, kwok) in a
folder, as the cluster tests take them:

    TIDINGS_BIN_DIR=/path/to/binaries .venv/bin/python -m tools.ui_screenshot [OUT.png]

OUT.png defaults to docs/ui-task.png. Needs Chromium (Debian's ``chromium``); about a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from tools.devcluster import NODE_NAME, REPO_ROOT, ControlPlane

NS, TASK = "ml", "train-resnet"
BIN = REPO_ROOT / ".venv" / "bin"

# One worker of the task: what a training loop reports (tidings.emitter), and its log lines.
WORKER = textwrap.dedent("""
    import math, random, sys, time
    from datetime import datetime, timezone
    from tidings import emitter as tidings
    rank, steps, pause, log = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    def say(text):
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with open(log, "a") as f:
            f.write(f"{stamp} stdout F {text}\\n")
    tidings.log_link("wandb", "https://wandb.example/acme/resnet/runs/7f3a")
    tidings.log_link(f"gpu-rank-{rank}", f"https://grafana.example/d/gpu?var-rank={rank}")
    say(f"rank {rank}: loading imagenet shard {rank} of 2")
    for step in range(1, steps + 1):
        with tidings.span("train_step"):
            time.sleep(pause * random.uniform(0.8, 1.2))
        loss = 2.3 * math.exp(-step / 40) + random.uniform(0, 0.05)
        tidings.metric("loss", loss, step=step)
        tidings.metric("lr", 0.1 * 0.5 * (1 + math.cos(math.pi * step / steps)), step=step)
        if step % 20 == 0:
            with tidings.span("evaluate"):
                time.sleep(pause * 3)
            tidings.metric("val_accuracy", 0.5 + 0.4 * (1 - math.exp(-step / 50)), step=step)
            say(f"rank {rank}: step {step} loss {loss:.3f}")
        tidings.progress(step / steps, f"rank {rank}: step {step}/{steps}")
    tidings.flush(10)
""")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else REPO_ROOT / "docs" / "ui-task.png")
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        cp = ControlPlane(state_dir=state / "cp").start()
        try:
            def kubectl(*args: str, stdin: str | None = None) -> str:
                return cp.kubectl_run(*args, input_text=stdin)

            admin = str(cp.kubeconfig("admin"))
            kubectl("apply", "-k", str(REPO_ROOT / "deploy"))
            kubectl("wait", "--for=condition=Established", "crd/taskfeedbacks.tidings.dev")
            kubectl("create", "namespace", NS)
            kubectl("-n", NS, "create", "serviceaccount", "trainer")
            kubectl("-n", NS, "create", "rolebinding", "trainer-emits",
                    "--clusterrole=tidings-workload", f"--serviceaccount={NS}:trainer")
            procs.append(subprocess.Popen(
                [str(BIN / "tidings"), "watcher", "run", "--kubeconfig", admin, "-n", NS,
                 "--no-leader-elect", "--metrics-port", "0", "--metrics-host", "127.0.0.1",
                 "--write-interval", "0.2"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
            for rank, (steps, pause) in enumerate([(200, 0.25), (200, 0.34)]):
                pod = f"{TASK}-worker-{rank}"
                log = state / f"{pod}.log"
                log.touch()
                kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                    "items": [
                        {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                         "metadata": {"name": pod, "namespace": NS},
                         "spec": {"logs": [{"containers": ["main"], "logsFile": str(log),
                                            "follow": True}]}},
                        {"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": pod, "namespace": NS,
                                      "labels": {"tidings.dev/task": TASK}},
                         "spec": {"nodeName": NODE_NAME, "serviceAccountName": "trainer",
                                  "containers": [{"name": "main",
                                                  "image": "example.com/resnet:1"}]}}]}))
                kubectl("-n", NS, "wait", "--for=jsonpath={.status.phase}=Running",
                        f"pod/{pod}")
                uid = kubectl("-n", NS, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}")
                token = kubectl("-n", NS, "create", "token", "trainer", "--bound-object-kind=Pod",
                                f"--bound-object-name={pod}", f"--bound-object-uid={uid}")
                kc = state / f"{pod}.kubeconfig"
                kc.write_text(json.dumps({
                    "apiVersion": "v1", "kind": "Config", "current-context": "pod",
                    "clusters": [{"name": "c", "cluster": {
                        "server": cp.server, "certificate-authority": str(cp.ca_file)}}],
                    "users": [{"name": "pod", "user": {"token": token.strip()}}],
                    "contexts": [{"name": "pod", "context": {"cluster": "c", "user": "pod",
                                                             "namespace": NS}}]}))
                env = {"PATH": os.environ["PATH"], "KUBECONFIG": str(kc), "HOSTNAME": pod,
                       "TIDINGS_EMIT_WORKERS": "2"}
                procs.append(subprocess.Popen(
                    [str(BIN / "python"), "-c", WORKER, str(rank), str(steps), str(pause),
                     str(log)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ui = subprocess.Popen([str(BIN / "tidings"), "ui", "-n", NS, "--port", "0",
                                   "--no-browser", "--kubeconfig", admin],
                                  stdout=subprocess.PIPE, text=True)
            procs.append(ui)  # type: ignore[arg-type]
            assert ui.stdout is not None
            url = ui.stdout.readline().split()[3]
            shoot(f"{url}tasks/{NS}/{TASK}", out)
            print(f"wrote {out}")
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(30)
            cp.stop()


# How long the run may take to show everything the picture is for.
SHOW_WITHIN_S = 180.0
METRICS = ("loss", "lr", "val_accuracy")
PODS = tuple(f"{TASK}-worker-{rank}" for rank in range(2))


def missing(page: Any, url: str) -> list[str]:
    """What the page does not show yet (empty: it is ready for the picture)."""
    import urllib.request

    out = []
    curves = page.eval_on_selector_all(
        "svg.spark", "els => els.map(e => e.getAttribute('aria-label'))")
    out += [f"the history of {m}" for m in METRICS if f"history of {m}" not in curves]
    if "one value" in page.inner_text("#task-body"):
        out.append("no metric reading 'one value'")
    with urllib.request.urlopen(f"{url}/timeline.svg", timeout=10) as r:
        svg = r.read().decode()
    out += [f"a timeline lane of {pod}" for pod in PODS if f">{pod}<" not in svg]
    if not page.eval_on_selector("img.timeline",
                                 "i => i.complete && i.naturalWidth > 0"):
        out.append("the timeline image loaded")
    if page.locator("#logs .line").count() <= 2:
        out.append("the log tail")
    return out


def shoot(url: str, out: Path) -> None:
    from tools import chromium

    with chromium.browser(1200, 900) as context:
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector("img.timeline", timeout=60_000)
        deadline = time.monotonic() + SHOW_WITHIN_S
        while lacking := missing(page, url):
            if time.monotonic() > deadline:
                raise SystemExit(f"the page did not show, within {SHOW_WITHIN_S:.0f} s: "
                                 + ", ".join(lacking))
            time.sleep(1)  # (the page follows the run live: nothing to reload)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)


if __name__ == "__main__":
    main()
