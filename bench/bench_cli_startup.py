"""Cold start of the `tidings` command: `--help`, and `state` against a live control plane.

Run: .venv/bin/python bench/bench_cli_startup.py   (needs the built control-plane binaries)
Prints medians of N runs next to `python -c pass`, the interpreter's own floor.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from support import add_control_plane_arg, control_plane, load_average  # bench/support.py

EXE = str(Path(sys.executable).parent / "tidings")


def timed(argv: list[str], runs: int, env: dict[str, str] | None = None) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, env=env)
        samples.append(time.perf_counter() - start)
    return median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="runs of each command (median)")
    add_control_plane_arg(ap)
    a = ap.parse_args()
    runs = 1 if a.smoke else a.runs

    floor = timed([sys.executable, "-c", "pass"], runs)
    rows = [("python -c pass", floor), ("tidings --help", timed([EXE, "--help"], runs))]
    with control_plane(a.control_plane, "bench-cli-") as cp:
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig("admin"))}
        rows.append(("tidings state missing (404 path)", timed([EXE, "state", "nope"], runs,
                                                               env)))
        rows.append(("tidings state --from-events", timed(
            [EXE, "state", "nope", "--from-events", "-o", "json"], runs, env)))
    print(f"({runs} runs each, medians; {load_average()})")
    print(f"{'command':<36}{'median ms':>10}{'x floor':>9}")
    for name, seconds in rows:
        print(f"{name:<36}{seconds * 1000:>10.0f}{seconds / floor:>9.1f}")


if __name__ == "__main__":
    main()
