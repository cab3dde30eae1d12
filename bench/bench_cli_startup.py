"""Start-up cost: `import tidings.emitter` (CPU), and `tidings get`, `list` and `state` side by
side with `kubectl get taskfeedback` (wall time) against one live control plane, in one run.

Run: .venv/bin/python bench/bench_cli_startup.py [--runs N] [--kubeconfig FILE]
(without --kubeconfig it starts a control plane of its own: needs the built binaries). The
`tidings` measured is the one beside the Python that runs this script, so another checkout's
venv (`../main/.venv/bin/python bench/bench_cli_startup.py`) gives the "before".

Commands are timed round-robin (one of each, N times), so load that comes and goes hits them
alike; the table gives medians, the ratio to kubectl measured in the same run, and the load
average before and after. Goals (issue 27): the emitter imports in <= 0.15 s of CPU; get,
list and state take <= 2x kubectl's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from tidings.cli.dev import devcluster

REPO = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).parent / "tidings")
IMPORT_CPU = ("import time; t = time.process_time(); import tidings.emitter; "
              "print(time.process_time() - t)")


def import_cpu(runs: int) -> tuple[float, float]:
    """Median CPU seconds of `import tidings.emitter`, and of the interpreter's start."""
    emitter, floor = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", IMPORT_CPU], capture_output=True,
                             text=True, check=True).stdout
        emitter.append(float(out))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        floor.append(time.perf_counter() - t0)
    return median(emitter), median(floor)


def setup(kubectl: str, kubeconfig: str, ns: str) -> None:
    def k(*args: str, stdin: str | None = None) -> None:
        subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", *args], input=stdin, text=True,
                       capture_output=True, check=True)

    k("apply", "-f", str(REPO / "deploy" / "crd.yaml"))
    k("wait", "--for=condition=Established", "crd/taskfeedbacks.tidings.dev", "--timeout=60s")
    k("create", "namespace", ns)
    tf = {"apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
          "metadata": {"name": "bench-1", "namespace": ns}, "spec": {"task": "bench-1"}}
    k("apply", "-f", "-", stdin=json.dumps(tf))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    dc = devcluster()  # the checkout's tools/devcluster.py
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--kubeconfig", help="a cluster of your own (default: a fresh local one)")
    ap.add_argument("--smoke", action="store_true",
                    help="one run of each, to check that the bench runs (no figures)")
    a = ap.parse_args()
    if a.smoke:
        a.runs = 1
    load_before = load_average()
    cpu, floor = import_cpu(a.runs)
    kubectl = str(dc.find_bin_dir() / "kubectl")
    ns = f"bench-startup-{os.getpid()}"
    with dc.admin_kubeconfig(a.kubeconfig, prefix="tidings-bench-startup-") as kubeconfig:
        setup(kubectl, kubeconfig, ns)
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        commands = {
            "kubectl get taskfeedback bench-1": [kubectl, "-n", ns, "get", "taskfeedback",
                                                 "bench-1"],
            "tidings get bench-1": [EXE, "get", "bench-1", "-n", ns],
            "tidings list": [EXE, "list", "-n", ns],
            "tidings state bench-1": [EXE, "state", "bench-1", "-n", ns],
            "tidings --help": [EXE, "--help"],
        }
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(a.runs):
            for name, argv in commands.items():
                t0 = time.perf_counter()
                subprocess.run(argv, env=env, capture_output=True, check=True)
                samples[name].append(time.perf_counter() - t0)
    base = median(samples["kubectl get taskfeedback bench-1"])
    print(f"load average before: {load_before}, after: {load_average()}; {a.runs} runs each")
    print(f"{'import tidings.emitter (CPU s)':<36}{cpu:>10.3f}   goal <= 0.150")
    print(f"{'python -c pass (wall s)':<36}{floor:>10.3f}")
    print(f"\n{'command':<36}{'median s':>10}{'x kubectl':>11}")
    for name, values in samples.items():
        m = median(values)
        print(f"{name:<36}{m:>10.3f}{m / base:>11.2f}")
    print("\ngoal: get, list and state <= 2.00x kubectl")


if __name__ == "__main__":
    main()
