"""The dev control plane's state dir rule, without starting anything: a directory the
launcher did not create is never wiped; and without a checkout, `tidings dev` says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.devcluster import OWNER_MARKER, ControlPlane, ControlPlaneError, kubelet_waiting_status


def claim(folder: Path) -> None:
    ControlPlane(state_dir=folder, bin_dir=folder)._claim_state_dir()


def test_a_users_non_empty_dir_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "data").mkdir()
    with pytest.raises(ControlPlaneError, match="not empty and was not created by tidings"):
        claim(tmp_path)
    assert (tmp_path / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / "data").is_dir() and not (tmp_path / OWNER_MARKER).exists()


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ControlPlaneError, match="is not a directory"):
        claim(tmp_path / "f")
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.parametrize("make", [lambda p: None, lambda p: p.mkdir()], ids=["new", "empty"])
def test_a_new_or_empty_dir_is_claimed(tmp_path: Path, make: object) -> None:
    folder = tmp_path / "state"
    make(folder)  # type: ignore[operator]
    claim(folder)
    assert [p.name for p in folder.iterdir()] == [OWNER_MARKER]


def test_its_own_dir_is_wiped_for_a_fresh_start(tmp_path: Path) -> None:
    claim(tmp_path)
    (tmp_path / "etcd" / "member").mkdir(parents=True)
    (tmp_path / "etcd" / "member" / "db").write_text("old")
    (tmp_path / "tokens.csv").write_text("old")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (tmp_path / "link").symlink_to(outside, target_is_directory=True)
    claim(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [OWNER_MARKER]
    assert (outside / "keep").read_text() == "keep"  # a symlink is removed, not followed


def test_without_a_checkout_tidings_dev_says_so_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As from a wheel: tidings lives in site-packages, the current directory is no checkout,
    # and the control plane was never imported.
    import sys

    from typer.testing import CliRunner

    import tidings
    from tidings.cli.main import app

    site = tmp_path / "site-packages" / "tidings"
    site.mkdir(parents=True)
    monkeypatch.setattr(tidings, "__file__", str(site / "__init__.py"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "tools.devcluster", raising=False)
    for args in (["dev", "up"], ["dev", "status"], ["dev", "down"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 5, res.output
        assert res.stdout == "" and res.stderr.count("\n") == 1
        assert res.stderr.startswith("error: the local control plane is not installed")
        assert "tidings checkout" in res.stderr
    assert "tools.devcluster" not in sys.modules


@pytest.mark.parametrize(("flag", "want"), [
    ([], ("job-controller", "garbage-collector-controller",
          "clusterrole-aggregation-controller", "node-lifecycle-controller",
          "taint-eviction-controller")),
    (["--no-controllers"], ())], ids=["default", "no-controllers"])
def test_dev_up_runs_the_controllers_a_cluster_runs_unless_told_not_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: list[str],
        want: tuple[str, ...]) -> None:
    # Only the choice is checked here (the control plane is not started): in the cluster
    # tests, test_dev_up_and_down_commands runs a Job on what `tidings dev up` starts and
    # test_a_node_that_goes_not_ready_has_its_pods_evicted loses a node (whose pods read
    # Running for ever unless the node lifecycle controller taints it and the taint
    # eviction controller evicts them, as in any cluster).
    from typer.testing import CliRunner

    from tidings.cli.main import app
    from tools import devcluster

    started: list[tuple[str, ...]] = []

    def start(self: ControlPlane, timeout: float = 90.0) -> ControlPlane:
        started.append(self.controllers)
        raise devcluster.ControlPlaneError("not started in a unit test")

    monkeypatch.setattr(devcluster.ControlPlane, "start", start)
    for name in devcluster.BINARIES:
        (tmp_path / name).touch()
    monkeypatch.setenv("TIDINGS_BIN_DIR", str(tmp_path))
    res = CliRunner().invoke(app, ["dev", "up", "--state-dir", str(tmp_path / "s"), *flag])
    assert res.exit_code == 1 and "not started in a unit test" in res.stderr, res.output
    assert started == [want]


def test_the_simulated_wait_is_a_pull_before_any_container_or_a_crash_loop_after_one() -> None:
    """What tests/node/test_simulation.py checks against the real kubelet, read by the
    watcher's rule: a pull that fails has no container yet; a crash loop has the last run."""
    from datetime import datetime

    from tidings._compat import UTC
    from tidings.schemas.engine.observed import pod_verdict

    pod = {"metadata": {"name": "p", "uid": "u"},
           "spec": {"containers": [{"name": "main", "image": "x:nope"}]}}
    pull = kubelet_waiting_status(pod, "ImagePullBackOff", 'Back-off pulling image "x:nope"')
    (c,) = pull["containerStatuses"]
    assert (pull["phase"], "containerID" in c, c["lastState"]) == ("Pending", False, {})
    crash = kubelet_waiting_status(pod, "CrashLoopBackOff", "back-off 10s", last_exit=3)
    (c,) = crash["containerStatuses"]
    assert (crash["phase"], c["restartCount"]) == ("Running", 1)
    assert c["lastState"]["terminated"]["containerID"] == c["containerID"]
    for status, reason, code in ((pull, "ImagePullBackOff", None),
                                 (crash, "CrashLoopBackOff", 3)):
        v = pod_verdict({**pod, "status": status}, seen=datetime.now(UTC))
        assert v is not None and (v.phase, v.reason, v.exit_code) == ("Waiting", reason, code)
