"""Benchmark `tidings ui` with 1,000 tasks on the real API server, in headless Chromium.

  page load  the list of 1,000 tasks, from navigation to the last row placed and sorted (and
             its HTML bytes), beside `kubectl get taskfeedbacks` and `tidings list` of the
             same tasks (the terminal's way), same run; a click that sorts the 1,000 rows
  latency    a status write to the DOM of a list tab and of the task's own tab, over N
             updates (p50/p99), beside the same write's arrival on a plain watch (what the
             API server alone takes), same run
  load       the server's CPU (cores) and memory (RSS) with 0 and with 5 open tabs (4 lists,
             1 task page) while status writes land on the 1,000 tasks at a steady rate

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python bench/bench_ui.py``
(``--control-plane DIR`` measures a running plane, ``--smoke`` only checks that it runs).
Needs Debian's chromium (``make debs``). Not a test.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from support import (  # bench/support.py
    REPO,
    add_control_plane_arg,
    control_plane,
    cpu_seconds,
    pct,
    training_status,
)

from tidings.kube import MERGE_PATCH, Client, ListWatch, WatchLines, connect
from tidings.schemas.wire.contract import taskfeedback_path

NS = "bench"
TIDINGS = str(REPO / ".venv" / "bin" / "tidings")
T0 = datetime.now(UTC) - timedelta(minutes=10)


def status(name: str, fraction: float, message: str) -> dict[str, Any]:
    return training_status(NS, name, fraction, message, T0)


def create_tasks(kube: Client, n: int) -> list[str]:
    names = [f"task-{i:04d}" for i in range(n)]

    def one(name: str) -> None:
        kube.request("POST", taskfeedback_path(NS), body={
            "apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
            "metadata": {"name": name, "namespace": NS}, "spec": {"task": name}},
            timeout=(5, 60))
        write(kube, name, random.random() * 0.9, "warming up")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    return names


def write(kube: Client, name: str, fraction: float, message: str) -> None:
    kube.request("PATCH", taskfeedback_path(NS, name, "status"),
                 body={"status": status(name, fraction, message)},
                 content_type=MERGE_PATCH, timeout=(5, 60))


def wall(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class Server:
    def __init__(self, kubeconfig: str) -> None:
        self.proc = subprocess.Popen(
            [TIDINGS, "ui", "-n", NS, "--port", "0", "--no-browser", "--kubeconfig",
             kubeconfig], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().split()[3]

    def rows(self) -> int:
        body = urllib.request.urlopen(self.url, timeout=30).read().decode()
        return body.count('<tr id="row:')

    def rss_mib(self) -> tuple[float, float]:
        fields = dict(line.split(":", 1) for line in
                      Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def page_load(context: Any, url: str, n: int) -> dict[str, float]:
    tab = context.new_page()
    try:
        t = time.perf_counter()
        tab.goto(url, wait_until="load", timeout=120_000)
        tab.wait_for_function(f"() => document.querySelectorAll('#tasks tbody tr').length >= {n}",
                              timeout=120_000)
        total = time.perf_counter() - t
        nav = tab.evaluate("() => { const e = performance.getEntriesByType('navigation')[0];"
                           " return [e.responseEnd, e.domContentLoadedEventEnd, "
                           "e.loadEventEnd, e.transferSize]; }")
        sort = tab.evaluate("() => { const b = document.querySelector(\"button[data-sort="
                            "'progress']\"); const t = performance.now(); b.click(); "
                            "return performance.now() - t; }")
        return {"total": total, "response": nav[0] / 1000, "dom": nav[1] / 1000,
                "load": nav[2] / 1000, "bytes": float(nav[3]), "sort": sort / 1000}
    finally:
        tab.close()


# When each awaited text first shows in the element ``id``, by the page's clock (textContent:
# no layout, so the measuring costs the page next to nothing).
OBSERVE = """id => {
    window.seen = {}; window.want = [];
    new MutationObserver(() => {
        if (!window.want.length) return;
        const el = document.getElementById(id);
        const text = el ? el.textContent : "";
        window.want = window.want.filter(m => {
            if (text.includes(m)) { window.seen[m] = Date.now(); return false; }
            return true;
        });
    }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def latency(context: Any, kube: Client, url: str, name: str, updates: int
            ) -> dict[str, list[float]]:
    """Status write to the DOM of a list tab and the task's tab, and to a plain watch."""
    tabs = {"list tab": context.new_page(), "task tab": context.new_page()}
    tabs["list tab"].goto(url, timeout=120_000)
    tabs["task tab"].goto(f"{url}tasks/{NS}/{name}", timeout=120_000)
    watched = {"list tab": f"row:{NS}/{name}", "task tab": "task-body"}
    for key, tab in tabs.items():
        tab.wait_for_function(f"() => document.querySelector('main').innerText.includes('{name}')",
                              timeout=120_000)
        tab.evaluate(OBSERVE, watched[key])
    arrived: dict[str, float] = {}
    lw = ListWatch(kube, taskfeedback_path(NS), {"fieldSelector": f"metadata.name={name}"})

    def watch() -> None:
        for change in lw:
            if isinstance(change, WatchLines):
                now = time.time()
                for line in change.lines:
                    text = line.decode()
                    for mark in [m for m in list(pending) if m in text]:
                        arrived[mark] = now
                        pending.discard(mark)

    pending: set[str] = set()
    threading.Thread(target=watch, daemon=True).start()
    time.sleep(2)  # the watch is open
    out: dict[str, list[float]] = {"plain watch": [], "list tab": [], "task tab": []}
    try:
        for i in range(updates):
            fraction = 0.05 + (i % 90) / 100
            message = f"update {i} of the bench"
            st = status(name, fraction, message)
            shown = {"list tab": f"{st['progress']['percent']}%", "task tab": message}
            pending.add(message)
            for key, tab in tabs.items():
                tab.evaluate("m => window.want.push(m)", shown[key])
            written = time.time()
            write(kube, name, fraction, message)
            for key, tab in tabs.items():
                at = tab.wait_for_function("m => window.seen[m]", arg=shown[key],
                                           timeout=60_000).json_value()
                out[key].append(at / 1000 - written)
            deadline = time.monotonic() + 30
            while message not in arrived and time.monotonic() < deadline:
                time.sleep(0.01)
            out["plain watch"].append(arrived.get(message, float("nan")) - written)
            time.sleep(0.2)  # a new percent each time: the list tab must see a change
    finally:
        lw.stop()
        for tab in tabs.values():
            tab.close()
    return out


def load(context: Any, server: Server, kube: Client, names: list[str], tabs: int,
         seconds: float, rate: float) -> dict[str, float]:
    opened = []
    for i in range(tabs):
        tab = context.new_page()
        url = server.url if i < tabs - 1 else f"{server.url}tasks/{NS}/{names[0]}"
        tab.goto(url, timeout=120_000)
        opened.append(tab)
    time.sleep(3)
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        i = 0
        next_at = time.monotonic()
        while not stop.is_set():
            name = names[0] if i % 10 == 0 else random.choice(names)
            write(kube, name, random.random() * 0.9, f"load {i}")
            writes[0] += 1
            i += 1
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))

    thread = threading.Thread(target=writer, daemon=True)
    c0, t0 = cpu_seconds(server.proc.pid), time.monotonic()
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join(30)
    elapsed = time.monotonic() - t0
    cores = (cpu_seconds(server.proc.pid) - c0) / elapsed
    rss, peak = server.rss_mib()
    for tab in opened:
        tab.close()
    return {"cores": cores, "rss": rss, "peak": peak, "writes/s": writes[0] / elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--loads", type=int, default=5, help="page loads (median)")
    ap.add_argument("--seconds", type=float, default=60, help="each load phase")
    ap.add_argument("--rate", type=float, default=20, help="status writes/s in the load phases")
    add_control_plane_arg(ap)
    args = ap.parse_args()
    if args.smoke:
        args.tasks, args.updates, args.loads, args.seconds = 20, 5, 1, 3.0
    from tools import chromium

    global NS
    NS = f"bench-ui-{secrets.token_hex(3)}"  # a plane of its own, or a shared one
    print(f"load average at start: {os.getloadavg()}")
    with control_plane(args.control_plane, "bench-ui-") as cp:
        server: Server | None = None
        try:
            kubeconfig = str(cp.kubeconfig("admin"))
            kube = connect(kubeconfig, None, maxsize=16)
            kube.request("POST", "/api/v1/namespaces", body={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            t = time.perf_counter()
            names = create_tasks(kube, args.tasks)
            print(f"created {len(names)} tasks in {time.perf_counter() - t:.1f}s")
            kubectl = wall([str(cp.kubectl), "--kubeconfig", kubeconfig, "get",
                            "taskfeedbacks", "-n", NS], args.loads)
            tidings_list = wall([TIDINGS, "list", "-n", NS, "--kubeconfig", kubeconfig],
                                args.loads)
            server = Server(kubeconfig)
            deadline = time.monotonic() + 120
            while server.rows() < args.tasks and time.monotonic() < deadline:
                time.sleep(0.5)
            with chromium.browser() as context:
                loads = [page_load(context, server.url, args.tasks) for _ in range(args.loads)]
                lat = latency(context, kube, server.url, names[len(names) // 2],
                              args.updates)
                idle = load(context, server, kube, names, 0, args.seconds, args.rate)
                busy = load(context, server, kube, names, 5, args.seconds, args.rate)
        finally:
            if server is not None:
                server.stop()

    def med(key: str) -> float:
        return statistics.median(x[key] for x in loads)

    print(f"\npage load, {args.tasks} tasks (median of {args.loads})")
    print(f"{'what':<44}{'seconds':>10}{'x kubectl':>11}")
    rows = [("tidings ui: navigation to all rows sorted", med("total")),
            ("  of which the HTML's last byte", med("response")),
            ("  of which DOMContentLoaded", med("dom")),
            ("  a click that sorts every row", med("sort")),
            ("kubectl get taskfeedbacks (process)", kubectl),
            ("tidings list (process)", tidings_list)]
    for what, secs in rows:
        print(f"{what:<44}{secs:>10.3f}{secs / kubectl:>11.2f}")
    print(f"HTML transferred: {med('bytes') / 1024:.0f} KiB")
    print(f"\nstatus write to DOM, {args.updates} updates")
    print(f"{'where':<16}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'p50 x watch':>13}")
    watch_p50 = pct(lat["plain watch"], 50)
    for key, xs in lat.items():
        xs = [x for x in xs if x == x]
        print(f"{key:<16}{pct(xs, 50) * 1000:>10.0f}{pct(xs, 99) * 1000:>10.0f}"
              f"{max(xs) * 1000:>10.0f}{pct(xs, 50) / watch_p50:>13.1f}")
    print(f"\nserver with {args.tasks} tasks, {args.seconds:.0f}s at ~{args.rate:.0f} "
          "status writes/s")
    print(f"{'tabs':<8}{'CPU cores':>11}{'RSS MiB':>10}{'peak MiB':>10}{'writes/s':>10}")
    for tabs, r in ((0, idle), (5, busy)):
        print(f"{tabs:<8}{r['cores']:>11.3f}{r['rss']:>10.0f}{r['peak']:>10.0f}"
              f"{r['writes/s']:>10.1f}")
    print(f"5 tabs / 0 tabs: CPU {busy['cores'] / max(idle['cores'], 1e-9):.2f}x, "
          f"RSS {busy['rss'] / idle['rss']:.2f}x")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
