"""Start-up cost: `import tidings.emitter` (CPU), and `tidings get`, `list` and `state` side by
side with `kubectl get taskfeedback` and a bare Python GET (wall time) against one live
control plane, in one run.

Run: .venv/bin/python bench/bench_cli_startup.py [--runs N] [--kubeconfig FILE]
     [--before VENV] [--instructions]
(without --kubeconfig it starts a control plane of its own: needs the built binaries). The
`tidings` measured is the one beside the Python that runs this script; ``--before`` measures
another checkout's venv (e.g. ../main/.venv) in the same run, round-robin with the rest, as
the "before" (its rows are marked ``before:``).

Commands are timed round-robin (one of each, N times, after one untimed round), so load that
comes and goes hits them alike; each runs with its bytecode cached as an installed package has
it (PYTHONDONTWRITEBYTECODE, if set, would have every edited module compiled on every run: the
cache goes to a temporary PYTHONPYCACHEPREFIX, so no checkout is written to); the table gives
medians of the wall time, its ratios to kubectl and to the floor measured in the same run, the
median CPU time (user + system) of each process and its ratio to the floor's (steadier than the
wall time when other work shares the cores), and the load average before and after;
``--instructions`` adds each Python command's instruction count (valgrind), which no load
moves. The "floor" row is a Python process that only reads the kubeconfig, makes the same GET
with the one Kubernetes client (urllib3 over TLS) and prints the phase: no command of ours can
be faster. Goals: the emitter imports in <= 0.15 s of CPU; get, list and state take
<= 1.3x the floor's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median

from support import load_averages, training_status  # bench/support.py

from tidings.cli.dev import devcluster

REPO = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).parent / "tidings")
FLOOR = ("from tidings.kube import connect; from tidings.schemas.contract import "
         "taskfeedback_path; print(connect().get(taskfeedback_path('{ns}', 'bench-1'))"
         "['status']['phase'])")
IMPORT_CPU = ("import time; t = time.process_time(); import tidings.emitter; "
              "print(time.process_time() - t)")


def import_cpu(runs: int, pythons: list[str]) -> tuple[list[float], float]:
    """Median CPU seconds of `import tidings.emitter` per Python (round-robin), and the wall
    time of the first one's start."""
    emitter: list[list[float]] = [[] for _ in pythons]
    floor = []
    for python in pythons:  # (the untimed round: bytecode written)
        subprocess.run([python, "-c", IMPORT_CPU], capture_output=True, check=True, cwd="/")
    for _ in range(runs):
        for i, python in enumerate(pythons):
            # (from /: a checkout's tidings/ in the working directory would shadow the
            # venv's own)
            out = subprocess.run([python, "-c", IMPORT_CPU], capture_output=True,
                                 text=True, check=True, cwd="/").stdout
            emitter[i].append(float(out))
        t0 = time.perf_counter()
        subprocess.run([pythons[0], "-c", "pass"], check=True)
        floor.append(time.perf_counter() - t0)
    return [median(e) for e in emitter], median(floor)


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far: beside the wall
    time, what a command costs when other work shares the cores."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """The instructions a run of ``argv`` executes, counted by valgrind: a figure the load of
    a shared machine does not move (its interpreter's work, not the server's answer time)."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           *argv], env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-500:]}")
    return int(found.group(1))


def setup(kubectl: str, kubeconfig: str, ns: str) -> None:
    def k(*args: str, stdin: str | None = None) -> None:
        subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", *args], input=stdin, text=True,
                       capture_output=True, check=True)

    k("apply", "-f", str(REPO / "deploy" / "crd.yaml"))
    # (a CRD read before its status is written makes `kubectl wait` fail at once: again)
    deadline = time.monotonic() + 60
    while True:
        try:
            k("wait", "--for=condition=Established", "crd/taskfeedbacks.tidings.dev",
              "--timeout=10s")
            break
        except subprocess.CalledProcessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    k("create", "namespace", ns)
    tf = {"apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
          "metadata": {"name": "bench-1", "namespace": ns}, "spec": {"task": "bench-1"}}
    k("apply", "-f", "-", stdin=json.dumps(tf))
    # What `state` reads when a watcher runs: the status it wrote (a training task's).
    status = training_status(ns, "bench-1", 0.4, "epoch 2/5",
                             datetime.now(UTC) - timedelta(minutes=10))
    k("-n", ns, "patch", "taskfeedback", "bench-1", "--subresource=status", "--type=merge",
      "-p", json.dumps({"status": status}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--kubeconfig", help="a cluster of your own (default: a fresh local one)")
    ap.add_argument("--smoke", action="store_true",
                    help="one run of each, to check that the bench runs (no figures)")
    ap.add_argument("--before", metavar="VENV",
                    help="another checkout's venv, measured in the same run (the 'before')")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each command's instructions once under valgrind "
                    "(callgrind; needs the valgrind command): the same on a busy machine "
                    "as on a quiet one")
    a = ap.parse_args()
    if a.smoke:
        a.runs = 1
    load_before = load_averages()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="tidings-bench-pycache-") as cache:
        os.environ["PYTHONPYCACHEPREFIX"] = cache
        measure(a, load_before)


def measure(a: argparse.Namespace, load_before: str) -> None:
    dc = devcluster()  # the checkout's tools/devcluster.py
    before = Path(a.before) / "bin" if a.before else None
    pythons = [sys.executable] + ([str(before / "python")] if before else [])
    cpus, floor = import_cpu(a.runs, pythons)
    kubectl = str(dc.find_bin_dir() / "kubectl")
    ns = f"bench-startup-{os.getpid()}"
    with dc.admin_kubeconfig(a.kubeconfig, prefix="tidings-bench-startup-") as kubeconfig:
        setup(kubectl, kubeconfig, ns)
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        floor_name = "floor: python + tidings.kube GET"
        commands = {
            "kubectl get taskfeedback bench-1": [kubectl, "-n", ns, "get", "taskfeedback",
                                                 "bench-1"],
            "tidings get bench-1": [EXE, "get", "bench-1", "-n", ns],
            "tidings list": [EXE, "list", "-n", ns],
            "tidings state bench-1": [EXE, "state", "bench-1", "-n", ns],
            "tidings --help": [EXE, "--help"],
            # The floor of any Python command here: the interpreter, the one Kubernetes client
            # and one GET, with no CLI at all.
            floor_name: [sys.executable, "-c", FLOOR.format(ns=ns)],
        }
        if before is not None:
            commands.update({f"before: {name}": [str(before / "tidings"), *argv[1:]]
                             for name, argv in list(commands.items())
                             if name.startswith("tidings ")})
        samples: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():  # (the untimed round)
            subprocess.run(argv, env=env, capture_output=True, check=True)
        for _ in range(a.runs):
            for name, argv in commands.items():
                c0, t0 = children_cpu(), time.perf_counter()
                subprocess.run(argv, env=env, capture_output=True, check=True)
                samples[name].append(time.perf_counter() - t0)
                cpu[name].append(children_cpu() - c0)
        counted = {name: instructions(argv, env) for name, argv in commands.items()
                   if not name.startswith("kubectl")} if a.instructions else {}
    base = median(samples["kubectl get taskfeedback bench-1"])
    floor_s, floor_cpu = median(samples[floor_name]), median(cpu[floor_name])
    print(f"load average before: {load_before}, after: {load_averages()}; {a.runs} runs each")
    print(f"{'import tidings.emitter (CPU s)':<40}{cpus[0]:>10.3f}   goal <= 0.150")
    if before is not None:
        print(f"{'before: import tidings.emitter':<40}{cpus[1]:>10.3f}")
    print(f"{'python -c pass (wall s)':<40}{floor:>10.3f}")
    print(f"\n{'command':<40}{'median s':>10}{'x kubectl':>11}{'x floor':>9}"
          f"{'CPU s':>9}{'x floor':>9}")
    for name, values in samples.items():
        m, c = median(values), median(cpu[name])
        print(f"{name:<40}{m:>10.3f}{m / base:>11.2f}{m / floor_s:>9.2f}"
              f"{c:>9.3f}{c / floor_cpu:>9.2f}")
    if counted:
        print(f"\n{'command (valgrind --tool=callgrind)':<40}{'M instr':>10}{'x floor':>9}")
        for name, n in counted.items():
            print(f"{name:<40}{n / 1e6:>10.1f}{n / counted[floor_name]:>9.2f}")
    print("\ngoal: get, list and state <= 1.30x the floor")


if __name__ == "__main__":
    main()
