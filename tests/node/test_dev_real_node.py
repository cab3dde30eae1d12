"""`tidings dev up --real-node` and `tidings dev down` as a person runs them: a second plane
with a node of its own beside the suite's (its own network namespace, addresses and cgroup),
whose pods run as containers, and nothing of it left after `dev down`: no process, container,
cgroup, network namespace, link or mount. A host that cannot run a node is told so before
anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import eventually
from tools.devcluster import ControlPlane
from tools.devnode import RealNode

TIDINGS = str(Path(sys.executable).parent / "tidings")


def leftovers(state: Path, node: RealNode) -> list[str]:
    """Whatever of the node or its plane is still there."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if str(state).encode() in cmdline:
                found.append(f"process {pid}: {cmdline[:120]!r}")
    found += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{node.cgroup}")]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {line}" for line in netns.splitlines() if node.netns in line]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link {node.host_link}" for line in links.splitlines() if node.host_link in line]
    found += [f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text()
              .splitlines() if str(state) in line]
    return found


def test_dev_up_real_node_runs_pods_as_containers_and_dev_down_leaves_nothing(
        real_node: RealNode, control_plane: ControlPlane, tmp_path: Path) -> None:
    state = tmp_path / "dev"
    env = {**os.environ, "TIDINGS_BIN_DIR": str(control_plane.bin_dir)}
    up = subprocess.run([TIDINGS, "dev", "up", "--real-node", "--state-dir", str(state)],
                        env=env, capture_output=True, text=True, timeout=300)
    node: RealNode | None = None
    try:
        assert up.returncode == 0, up.stderr
        assert "real-node-0 runs pods as containers" in up.stderr
        dev = ControlPlane.load(state)
        node = dev.node
        assert node is not None and node.index != real_node.index  # beside the suite's
        status = subprocess.run([TIDINGS, "dev", "status", "--state-dir", str(state)],
                                capture_output=True, text=True, timeout=60)
        assert f"real node: real-node-0 ({node.node_ip}" in status.stdout, status.stdout
        shell = f"{up.stdout}\nkubectl run hello --image=tidings-workload:dev " \
                "--restart=Never --command -- python3 -c 'print(6 * 7)'"
        ran = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        eventually(lambda: dev.kubectl_run("logs", "hello", check=False).strip() == "42", 120,
                   "the container's output")
    finally:
        down = subprocess.run([TIDINGS, "dev", "down", "--state-dir", str(state)],
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert node is not None
    assert leftovers(state, node) == []


def test_a_host_that_cannot_run_a_node_is_told_before_anything_starts(
        real_node: RealNode, control_plane: ControlPlane, tmp_path: Path) -> None:
    state = tmp_path / "nobody"
    state.mkdir(mode=0o777)
    env = {**os.environ, "TIDINGS_BIN_DIR": str(control_plane.bin_dir), "HOME": str(tmp_path)}
    up = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                         TIDINGS, "dev", "up", "--real-node", "--state-dir", str(state)],
                        env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 1, up.stderr
    assert up.stderr.strip().splitlines()[-1] == (
        "error: a real node needs root (network namespaces, cgroups, mounts); run as root")
    assert "Traceback" not in up.stderr
    assert not any(state.iterdir())  # no plane was started
