"""`make demo-real` (deploy/demo-real.sh) tells its story with real containers: the watcher
from its chart, a Job's two pods reporting to a Succeeded task, their real output through
`tidings logs`, and one worker OOM-killed by the kernel, failed with OOMKilled."""

from __future__ import annotations

import os
import re
import subprocess

from tools.devcluster import REPO_ROOT, ControlPlane
from tools.devnode import RealNode


def test_demo_real_exits_zero_and_shows_the_real_story(real_node: RealNode,
                                                       control_plane: ControlPlane) -> None:
    env = {**os.environ, "TIDINGS_BIN_DIR": str(control_plane.bin_dir), "COLUMNS": "120"}
    run = subprocess.run([str(REPO_ROOT / "deploy/demo-real.sh")], env=env,
                         capture_output=True, text=True, timeout=600)
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    assert re.search(r"tidings-watcher-\S+\s+1/1\s+Running\s+0\s+\S+\s+\S+\s+real-node-0", out)
    job = out.split("2. a training Job")[1].split("3. one worker dies")[0]
    assert re.search(r"Phase\s+Succeeded", job) and "2 of 2 final" in job
    assert job.count("/train] epoch 4/4 done") == 2  # each container's own output
    death = out.split("3. one worker dies")[1].split("done: every pod")[0]
    assert re.search(r"finetune-7-\S+\s+Failed\s+OOMKilled\s+137", death)
    assert re.search(r"Phase\s+Failed", death) and "Failed: OOMKilled (exit 137)" in death
