"""The kind run's pieces that can be checked without a cluster: the engine's runc wrapper drops
exactly the capabilities root does not hold (for a container's spec and for an exec's), and
the pod network's manifest is one kind installs and patches (tools/kind/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KIND_TOOLS = ROOT / "tools" / "kind"
HELD = "CAP_CHOWN"  # every root holds it
UNKNOWN = "CAP_NOT_HELD_BY_ANYONE"


def _caps(names: list[str]) -> dict[str, list[str]]:
    return {s: list(names) for s in ("bounding", "effective", "permitted", "inheritable")}


@pytest.fixture
def fake_runc(tmp_path: Path) -> Path:
    """A `runc` on PATH that records its arguments, so the wrapper's exec is observed."""
    for tool in ("jq", "capsh"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make node-debs installs it)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    runc = bin_dir / "runc"
    runc.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/runc-args\n')
    runc.chmod(0o755)
    return bin_dir


def _wrap(bin_dir: Path, *args: str) -> list[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run([str(KIND_TOOLS / "runc-caps.sh"), *args], env=env, check=True, timeout=30)
    return (bin_dir.parent / "runc-args").read_text().splitlines()


def test_a_containers_spec_loses_the_capabilities_root_lacks(fake_runc: Path,
                                                            tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"process": {"capabilities": _caps([HELD, UNKNOWN]), "args": ["/sbin/init"]},
            "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(spec))
    argv = ["--root", "/run/x", "create", "--bundle", str(bundle), "--pid-file", "p", "id1"]
    assert _wrap(fake_runc, *argv) == argv
    out = json.loads((bundle / "config.json").read_text())
    assert out["process"]["capabilities"] == _caps([HELD])
    assert out["process"]["args"] == ["/sbin/init"] and out["root"] == {"path": "rootfs"}


def test_an_execs_process_loses_them_too(fake_runc: Path, tmp_path: Path) -> None:
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"capabilities": _caps([UNKNOWN, HELD]), "args": ["sh"]}))
    _wrap(fake_runc, "exec", f"--process={process}", "id1")
    assert json.loads(process.read_text())["capabilities"] == _caps([HELD])


def test_other_commands_pass_through_untouched(fake_runc: Path) -> None:
    assert _wrap(fake_runc, "--root", "/run/x", "state", "id1") == ["--root", "/run/x",
                                                                     "state", "id1"]


def _cni_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KIND_TOOLS / "default-cni.yaml").read_text()) if d]


def test_the_pod_network_manifest_is_one_kind_patches() -> None:
    """kind adds CONTROL_PLANE_ENDPOINT to the first container's env of the DaemonSet of a
    manifest carrying its phrase (a JSON patch that fails where there is no env list), and
    templates one carrying the other phrase (this one must not be: its script uses `{}`)."""
    text = (KIND_TOOLS / "default-cni.yaml").read_text()
    assert "would you kindly patch this file" in text
    assert "would you kindly template this file" not in text
    (daemonset,) = [d for d in _cni_documents() if d["kind"] == "DaemonSet"]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert isinstance(container["env"], list) and container["env"]
    assert daemonset["spec"]["template"]["spec"]["hostNetwork"] is True


def test_the_pod_network_runs_the_image_the_build_preloads() -> None:
    script = (KIND_TOOLS / "build-node-image.sh").read_text()
    suite = re.search(r"^NODE_SUITE=(\S+)", (KIND_TOOLS / "versions.env").read_text(), re.M)
    tools_image = re.search(r"^TOOLS_IMAGE=(\S+)", script, re.M)
    assert suite and tools_image
    expected = tools_image.group(1).replace("$NODE_SUITE", suite.group(1))
    (daemonset,) = [d for d in _cni_documents() if d["kind"] == "DaemonSet"]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    # Never pulled: no registry serves it.
    assert (container["image"], container["imagePullPolicy"]) == (expected, "Never")
