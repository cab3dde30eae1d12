"""The README's "Try it in five minutes", run as written: the sh block between its try-it
markers, pasted into bash from the checkout, on a local control plane of its own (`tidings
dev up`), must end with the pod's task Succeeded."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tools.devcluster import REPO_ROOT, find_bin_dir

pytestmark = pytest.mark.cluster


def recipe() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("<!-- try-it: begin", 1)[1].split("<!-- try-it: end -->", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return block


def test_the_readme_recipe_runs_as_written(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "POD_",
                                                                     "TIDINGS_TASK"))}
    env.update(TIDINGS_DEV_DIR=str(tmp_path / "dev"), TMPDIR=str(tmp_path),
               TIDINGS_BIN_DIR=str(find_bin_dir()))
    # Its own session: the watcher it starts in the background goes with it, whatever happens.
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", recipe()], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None or proc.returncode != 0:
            subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "tidings"), "dev", "down"],
                           env=env, capture_output=True, timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"{out}\n{err}"
    lines = out.splitlines()
    assert "taskfeedback.tidings.dev/try-42 condition met" in lines, out
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["NAME", "PHASE"])
    assert lines[header + 1].split()[:3] == ["try-42", "Succeeded", "100%"], out
    # `tidings state`: the link, the deck and the spans train.py sent, from the pod.
    for text in ("wandb-train-0", "report-train-0", "epoch", "train-0"):
        assert text in out, text
    # The recipe cleans up after itself: no process of its control plane or watcher is left.
    left = subprocess.run(["pgrep", "-af", str(tmp_path)], capture_output=True, text=True)
    assert left.stdout == "", left.stdout
