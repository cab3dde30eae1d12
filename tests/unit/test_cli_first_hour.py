"""What a newcomer types in the first hour, without a cluster: errors that name the file and
the place that is wrong, and the shell completions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidings.kube import ConfigError, load

TIDINGS = str(Path(sys.executable).parent / "tidings")


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "TIDINGS_DEBUG")}
    return subprocess.run([TIDINGS, *args], env={**clean, **env}, capture_output=True,
                          text=True, timeout=60)


def test_a_kubeconfig_variable_naming_a_missing_file_names_it(tmp_path: Path) -> None:
    res = run("list", KUBECONFIG="/nonexistent.yaml", HOME=str(tmp_path))
    assert res.returncode == 3
    assert res.stderr == ("error: no cluster configured: KUBECONFIG names '/nonexistent.yaml', "
                          "which does not exist (and not running in a pod)\n")
    res = run("list", KUBECONFIG=f"/a.yaml{os.pathsep}/b.yaml", HOME=str(tmp_path))
    assert res.returncode == 3 and "'/a.yaml', '/b.yaml', none of which exist" in res.stderr
    # KUBECONFIG=/dev/null is there and names no cluster (a common way to say "none").
    res = run("list", KUBECONFIG="/dev/null", HOME=str(tmp_path))
    assert res.returncode == 3 and "does not exist" not in res.stderr, res.stderr
    assert "KUBECONFIG names '/dev/null', which holds no cluster" in res.stderr
    # No KUBECONFIG at all: say which default was looked for.
    res = run("list", HOME=str(tmp_path))
    assert res.returncode == 3 and "~/.kube/config does not exist" in res.stderr
    # `tidings emit` says the same.
    res = run("emit", "progress", "0.5", "--task", "t", KUBECONFIG="/nonexistent.yaml",
              HOME=str(tmp_path))
    assert "KUBECONFIG names '/nonexistent.yaml', which does not exist" in res.stderr


@pytest.mark.parametrize(("text", "where"), [
    ("apiVersion: v1\nclusters:\n- name: x\n  cluster:\n    server: https://h\n   bad: 1\n",
     "line 6, column 4: did not find expected key"),
    ("clusters: [1, 2\n", "line 2, column 1: did not find expected ',' or ']'"),
    ("current-context: a: b\n",
     "line 1, column 19: mapping values are not allowed in this context"),
])
def test_a_malformed_kubeconfig_says_where(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(str(path), env={"HOME": str(tmp_path)})
    assert str(err.value) == f"kubeconfig {str(path)!r} is not valid YAML: {where}"
    res = run("list", KUBECONFIG=str(path), HOME=str(tmp_path))
    assert res.returncode == 2
    assert res.stderr == f"error: invalid input: kubeconfig {str(path)!r} is not valid YAML: " \
        f"{where}\n"
    assert "ParserError" not in res.stderr and "ScannerError" not in res.stderr


def test_an_unreadable_kubeconfig_says_why(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        folder = tmp_path / "dir.yaml"  # root reads every file: use a folder named like one
        folder.mkdir()
        res = run("list", "--kubeconfig", str(folder), HOME=str(tmp_path))
        assert res.returncode == 2 and f"kubeconfig {str(folder)!r} is not a file" in res.stderr
        return
    path = tmp_path / "config.yaml"
    path.write_text("{}")
    path.chmod(0)
    res = run("list", KUBECONFIG=str(path), HOME=str(tmp_path))
    assert res.returncode == 2 and "Permission denied" in res.stderr


def complete(words: str) -> list[str]:
    """What bash completion offers for the last word of ``words`` (typer's protocol)."""
    res = run(_TIDINGS_COMPLETE="complete_bash", COMP_WORDS=words,
              COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)),
              KUBECONFIG="/nonexistent.yaml")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    return res.stdout.split()


def test_output_formats_complete() -> None:
    assert complete("tidings list -o ") == ["table", "wide", "name", "json", "yaml",
                                            "jsonpath="]
    assert complete("tidings get -o j") == ["json", "jsonpath="]
    assert complete("tidings logs app -o ") == ["text", "jsonl"]
    assert complete("tidings state t -o y") == ["yaml"]
    # Without a cluster, names complete to nothing, silently.
    assert complete("tidings logs tr") == []


def test_get_refuses_a_name_that_could_bend_its_field_selector() -> None:
    for name in ("a,b", "x=y", "UPPER"):
        res = run("get", name, KUBECONFIG="/nonexistent.yaml")
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith(f"error: invalid input: task {name!r} is not a valid name")
