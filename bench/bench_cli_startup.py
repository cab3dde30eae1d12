"""Cold start of the `tidings` command: `--help`, and `state` against a live control plane.

Run: .venv/bin/python bench/bench_cli_startup.py   (needs the built control-plane binaries)
Prints medians of N runs next to `python -c pass`, the interpreter's own floor.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

RUNS = 9
EXE = str(Path(sys.executable).parent / "tidings")


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, env=env)
        samples.append(time.perf_counter() - start)
    return median(samples)


def main() -> None:
    import os

    from tidings.cli.dev import devcluster

    ControlPlane = devcluster().ControlPlane  # the checkout's tools/devcluster.py

    floor = timed([sys.executable, "-c", "pass"])
    rows = [("python -c pass", floor), ("tidings --help", timed([EXE, "--help"]))]
    with tempfile.TemporaryDirectory() as state, ControlPlane(state_dir=Path(state)) as cp:
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig("admin"))}
        rows.append(("tidings state missing (404 path)", timed([EXE, "state", "nope"], env)))
        rows.append(("tidings state --from-events", timed(
            [EXE, "state", "nope", "--from-events", "-o", "json"], env)))
    print(f"{'command':<36}{'median ms':>10}{'x floor':>9}")
    for name, seconds in rows:
        print(f"{name:<36}{seconds * 1000:>10.0f}{seconds / floor:>9.1f}")


if __name__ == "__main__":
    main()
