"""The watcher's settings, declared once (watcher/settings.py): the flags of `tidings watcher
run` come from the declarations, and every bound they declare is enforced with one line."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from typer.testing import CliRunner

from tidings.cli.main import app
from tidings.schemas.status.health import THRESHOLDS
from tidings.watcher.settings import Options, Settings, problems


def test_every_declared_flag_is_a_flag_of_watcher_run_with_its_help_and_env() -> None:
    shown = " ".join(CliRunner().invoke(app, ["watcher", "run", "--help"],
                                        terminal_width=200).stdout.split())
    declared = [f for f in fields(Options) if f.metadata.get("help")]
    assert len(declared) >= 20
    for f in declared:
        assert " ".join(f.metadata["help"].split()) in shown, f.name
        if f.metadata["env"]:
            assert f.metadata["env"] in shown, f.name
    # The health conditions' thresholds are flags too, declared by schemas/status/health.py.
    for t in THRESHOLDS.values():
        assert " ".join(t.help.split()) in shown and t.flag in shown and t.env in shown
    # Internal knobs are settings but never flags.
    assert "--page-size" not in shown and "--slow-writes" not in shown


@pytest.mark.parametrize("changes,message", [
    ({"concurrency": 0}, "--concurrency must be at least 1"),
    ({"write_interval": -0.1}, "--write-interval must not be negative"),
    ({"ttl_after_finished": -1.0}, "--ttl-after-finished must not be negative"),
    ({"clock_skew": 86401.0}, "--clock-skew must be 0..86400 s"),
    ({"event_ttl": 59.0}, "--event-ttl must be at least 60 s"),
    ({"max_instances": 15}, "--max-instances must be at least 16"),
    ({"metrics_port": 65536}, "--metrics-port must be 0..65535"),
    ({"lease_duration": 0.5}, "--lease-duration must be at least 1 s"),
    ({"write_policy": "random"}, "--write-policy must be priority or fifo"),
    ({"health": {"stall_factor": 0.5}}, "--stall-factor must be at least 1"),
    ({"health": {"straggle_ratio": 1.5}}, "--straggle-ratio must be 0..1"),
])
def test_each_bound_is_named_in_one_message(changes: dict[str, Any], message: str) -> None:
    assert problems(Options()) == []
    assert problems(Options(**changes)) == [message]


@pytest.mark.parametrize("args,env", [
    (["--ttl-after-finished", "-1"], {}),
    ([], {"TIDINGS_MAX_INSTANCES": "3"}),
    ([], {"TIDINGS_STRAGGLE_MIN_WORKERS": "1"}),
    (["--metrics-port", "70000"], {}),
])
def test_an_out_of_bounds_flag_or_variable_is_one_line_exit_2_before_connecting(
        args: list[str], env: dict[str, str], tmp_path: Any) -> None:
    res = CliRunner().invoke(app, ["watcher", "run", "--kubeconfig", str(tmp_path / "absent"),
                                   *args], env=env)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: --") and res.stderr.count("\n") == 1, res.stderr
    assert "Kubernetes configuration" not in res.stderr  # refused before any connection


def test_namespaces_repeat_or_list_and_come_out_as_one_sorted_set() -> None:
    assert Settings(namespaces=["b,a", " c ", "a", ""]).namespaces == ["a", "b", "c"]


def test_the_lease_namespace_defaults_to_the_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "tidings-system")
    assert Options().lease_namespace == "tidings-system"
    assert Options(lease_namespace="elsewhere").lease_namespace == "elsewhere"
    monkeypatch.delenv("POD_NAMESPACE")
    assert Options().lease_namespace == "default"
