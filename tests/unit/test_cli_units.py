"""Pure parts of the CLI: input checks, the no-repeat rule of resumed log streams, log line
formats and filters, the timeline drawing, sanitised output, and one-line usage errors (no
cluster needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.main import get_command as typer_command
from typer.testing import CliRunner

from tidings.cli.common import CliError, Output, check_name, dump, parse_duration
from tidings.cli.logstream import Dedup, since_time, ts_key
from tidings.cli.main import app
from tidings.cli.timeline_cmd import busy_bar, svg
from tidings.schemas.status.decoder import decode_status

HOSTILE = "ok\x1b[31mred\x1b]0;pwned\x07\x9b2J\x08\r\x00end\u202e"


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800), ("250ms", 0.25), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "5x", "-5s", "0s", "5s junk", "1h 30m"])
def test_bad_durations_are_invalid_input(text: str) -> None:
    with pytest.raises(CliError) as err:
        parse_duration(text)
    assert err.value.code == 2


@pytest.mark.parametrize("name", ["a,b", "x=y", "a b", "", "-x", "x/y", "a\x1b[2J", "é", "task\n"])
def test_names_that_could_bend_a_field_selector_are_refused(name: str) -> None:
    with pytest.raises(CliError) as err:
        check_name(name, "task")
    assert err.value.code == 2
    assert "\x1b" not in err.value.message


def test_timestamps_compare_exactly() -> None:
    a = ts_key("2026-11-30T04:10:03.1Z")
    b = ts_key("2026-11-30T04:10:03.12Z")
    c = ts_key("2026-11-30T04:10:03.120000001Z")
    assert a is not None and b is not None and c is not None
    assert a < b < c  # as strings, "03.1Z" > "03.12Z"
    assert ts_key("2026-11-30T05:10:03.1+01:00") == a
    assert ts_key("not a time") is None
    assert since_time(c) == "2026-11-30T04:10:03Z"


def test_a_resumed_stream_repeats_nothing_and_loses_nothing() -> None:
    d = Dedup()
    first = [1, 2, 2, 3]
    assert [d.admit(k) for k in first] == [True] * 4
    d.reconnect()  # resumed at the second of "3": the server sends from there again
    again = [2, 2, 3, 4, 5]
    assert [d.admit(k) for k in again] == [False, False, False, True, True]
    d.reconnect()
    # Two lines share the last timestamp; one was shown, the other is new.
    d2 = Dedup()
    assert [d2.admit(k) for k in [7, 8]] == [True, True]
    d2.reconnect()
    assert [d2.admit(k) for k in [7, 8, 8, 9]] == [False, False, True, True]
    assert d2.admit(None) is True  # a line without a timestamp is always shown


def test_bars_fit_their_width_and_show_each_window() -> None:
    assert busy_bar([[0, 10]], 10, 8) == "█" * 8
    assert busy_bar([[5, 10]], 10, 8) == "    ████"
    assert busy_bar([[0, 0]], 10, 8) == "█" + " " * 7  # a zero-length window is still visible
    assert len(busy_bar([[9.99, 10]], 10, 8)) == 8
    assert busy_bar([[0, 1.0]], 8.0, 8).rstrip() == "█"
    # Three short windows far apart are three marks, not one bar from first to last.
    assert busy_bar([[0, 0.1], [4, 4.1], [7.9, 8]], 8.0, 8) == "█   █  █"


def test_svg_escapes_hostile_names() -> None:
    rows = [{"name": "<script>alert(1)</script>" + HOSTILE, "count": 1, "total_s": 1.0,
             "mean_s": 1.0, "min_s": 1.0, "max_s": 1.0, "errors": 0, "first_start": 1e9,
             "last_end": 1e9 + 1, "offset_s": 0.0, "duration_s": 1.0,
             "windows": [[0.0, 1.0]]}]
    text = svg("t\"&", "ns", rows)
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "t&quot;&amp;" in text
    assert not any(ord(c) < 0x20 and c != "\n" for c in text)
    import xml.dom.minidom

    xml.dom.minidom.parseString(text)  # well-formed


def test_json_and_yaml_output_are_sanitised() -> None:
    data = {"message": HOSTILE, HOSTILE: [HOSTILE, 1, None]}
    for fmt in (Output.json, Output.yaml):
        text = dump(data, fmt)
        assert not any(c in text for c in "\x1b\x07\x9b\x08\x00\u202e")
        loaded = json.loads(text) if fmt is Output.json else yaml.safe_load(text)
        assert loaded["message"] == "okred end"
        assert loaded["okred end"] == ["okred end", 1, None]


def test_usage_errors_are_one_line_and_exit_2() -> None:
    runner = CliRunner()
    for args, needle in ((["state"], "Missing argument 'TASK'"),
                         (["state", "t", "-o", "xml"], "'xml'"),
                         (["logs", "a", "--max-streams", "0"], "--max-streams"),
                         (["state", "a,b"], "invalid input: task"),
                         (["nope"], "No such command")):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.count("\n") == 1 and needle in res.stderr, res.stderr
        assert res.stderr.startswith("error: ")


def test_no_cluster_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    res = CliRunner().invoke(app, ["state", "t"])
    assert res.exit_code == 3 and res.stderr.startswith("error: no cluster configured")
    res = CliRunner().invoke(app, ["lineage", "a", "--kubeconfig", str(tmp_path / "x.yaml")])
    assert res.exit_code == 2 and "does not exist" in res.stderr


def test_help_imports_nothing_heavy() -> None:
    # Start-up time lives in bench/bench_cli_startup.py; what keeps it low is testable:
    # `tidings --help` must not import the kubernetes client or pydantic.
    probe = ("import sys, runpy; sys.argv = ['tidings', '--help']\n"
             "try:\n    runpy.run_module('tidings.cli.main', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "from tidings.cli.main import app\n"
             "from typer.testing import CliRunner\n"
             "CliRunner().invoke(app, ['--help'])\n"
             "print('HEAVY', sorted(m for m in ('kubernetes', 'pydantic', 'urllib3')"
             " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert "HEAVY []" in out, out


def test_a_command_line_loads_its_own_command_alone(tmp_path: Path) -> None:
    # `tidings get` (<= 1.3x a bare Python GET, bench/bench_cli_startup.py) builds
    # and imports its own command only, and its flags cost no pydantic (typer >= 0.29
    # coerces every flag through a pydantic TypeAdapter: pyproject pins below it); a one-shot
    # get loads no list+watch loop either.
    others = [f"tidings.cli.{m}" for m in ("state_cmd", "lineage_cmd", "timeline_cmd",
                                           "ui_cmd", "dev", "emit", "watcher_cmd",
                                           "task_cmd", "taskread", "taskfollow",
                                           "taskrender", "snapshot", "namespace")]
    others.append("tidings.kube.watch")
    probe = ("import sys\n"
             "from tidings.cli.main import app\n"
             f"sys.argv = ['tidings', 'get', 't', '-n', 'ns', '--kubeconfig', "
             f"{str(tmp_path / 'absent')!r}]\n"
             "try:\n    app(prog_name='tidings')\n"
             "except SystemExit as e:\n    print('EXIT', e.code)\n"
             f"print('LOADED', sorted(m for m in {[*others, 'pydantic', 'rich']!r}"
             " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert "EXIT 2" in out.stdout and "does not exist" in out.stderr, out  # it ran
    assert "LOADED []" in out.stdout, out.stdout


def test_a_command_is_built_without_its_siblings(monkeypatch: pytest.MonkeyPatch) -> None:
    # list_cmd registers `list` and `get`: `tidings get` has typer build `get` alone.
    import typer.main

    from tidings.cli.main import load_command

    built: list[str | None] = []
    build = typer.main.get_command_from_info

    def counted(info: typer.models.CommandInfo, **kw: Any) -> Any:
        built.append(info.name)
        return build(info, **kw)

    monkeypatch.setattr(typer.main, "get_command_from_info", counted)
    assert load_command("get").name == "get" and built == ["get"]
    assert load_command("describe").name == "describe" and built == ["get", "describe"]
    assert load_command("watch").name == "watch" and built[-1] is None  # (named by typer)


def test_a_list_row_loads_no_page_model() -> None:
    # A row of `tidings get`/`list` (every output format) reads the object with the list
    # row's model (schemas/view/summary.py): the page's model, its eleven dataclasses, stays out.
    obj = {"metadata": {"name": "t", "namespace": "ns", "creationTimestamp":
                        "2026-11-30T11:00:00Z"},
           "status": {"phase": "Running", "progress": {"percent": 40, "message": "m",
                                                       "estimatedCompletionTime":
                                                       "2026-11-30T13:00:00Z"},
                      "conditions": [{"type": "Stalled", "status": "True"}],
                      "health": {"summary": "Stalled"}, "linkCount": 1}}
    probe = ("import sys\n"
             "from tidings.cli.list_cmd import Printer\n"
             f"obj = {obj!r}\n"
             "for fmt in ('table', 'wide', 'name', 'json', 'yaml', 'jsonpath={.items[0].m'"
             "'etadata.name}'):\n"
             "    p = Printer(fmt, True, sys.stdout.write)\n"
             "    p.listing([obj], '9')\n"
             "    p.change(obj)\n"
             "print('LOADED', sorted(m for m in ('tidings.schemas.view.model',"
             " 'tidings.schemas.engine.state',"
             " 'pydantic', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert "   Stalled   " in out and "taskfeedback.tidings.dev/t\n" in out, out  # (it ran)
    assert "LOADED []" in out, out


def test_every_command_is_listed_and_built_as_its_module_defines_it() -> None:
    from typer._click import Context

    from tidings.cli.main import COMMANDS, app

    res = CliRunner().invoke(app, ["--help"])
    listed = [line.split()[0] for line in res.output.split("Commands:")[1].splitlines()
              if line.strip()]
    assert listed == list(COMMANDS)
    root = typer_command(app)
    ctx = Context(root)
    for name in COMMANDS:
        command = root.get_command(ctx, name)
        assert command is not None and command.name == name
    assert root.get_command(ctx, "nope") is None


def test_log_lines_are_prefixed_coloured_per_pod_and_neutralised() -> None:
    import io

    from tidings.cli.logstream import Printer

    out = io.StringIO()
    p = Printer(out=out, err=io.StringIO(), color=True)
    p.line("pod-a", "main", "", HOSTILE)
    p.line("pod-b", "main", "", "plain")
    p.line("pod-a", "side", "", "again")
    a, b, a2 = out.getvalue().splitlines()
    colour_a = a[: a.index("[pod-a")]
    assert colour_a.startswith("\x1b[") and a2.startswith(colour_a)  # one colour per pod
    assert a.endswith("\x1b[0m okred end")  # only our own colour codes, never the pod's
    assert "[pod-b/main]" in b
    plain = io.StringIO()
    Printer(out=plain, timestamps=True).line("p", "c", "2026-01-01T00:00:00Z", "x")
    assert plain.getvalue() == "[p/c] 2026-01-01T00:00:00Z x\n"


@given(st.text())
def test_a_jsonl_log_line_is_one_line_of_json_that_parses_back_and_carries_no_controls(
        text: str) -> None:
    """-o jsonl: whatever the container wrote, one JSON line with that exact text, and no raw
    character a terminal acts on (orjson leaves DEL and C1 raw; we escape them)."""
    import io

    from tidings.cli.logstream import Printer

    out = io.StringIO()
    Printer(out=out, jsonl=True).line("p", "c", "", text)
    printed = out.getvalue()
    assert printed.endswith("\n") and printed.count("\n") == 1
    assert json.loads(printed) == {"pod": "p", "container": "c", "line": text}
    assert not [c for c in printed[:-1] if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F]


def test_include_and_exclude_filters_select_lines_like_stern() -> None:
    import re

    from tidings.cli.logstream import Options

    o = Options(include=(re.compile("WARN"), re.compile("ERR")), exclude=(re.compile("noisy"),))
    assert [t for t in ["INFO a", "WARN b", "ERR c", "WARN noisy"] if o.shows(t)] == \
        ["WARN b", "ERR c"]
    assert Options().shows("anything") and not Options(exclude=(re.compile(""),)).shows("x")


# --- refusals of a local fold ------------------------------------------


@given(st.lists(st.tuples(st.sampled_from(["spoofed_sender", "other_object", "bad_name"]),
                          st.integers(min_value=0, max_value=60)), max_size=400))
def test_refusals_are_grouped_bounded_and_all_counted(refusals: list[tuple[str, int]]) -> None:
    from tidings.cli.snapshot import MAX_REFUSAL_GROUPS, OTHER_SENDERS, Refusals

    r = Refusals()
    for reason, pod in refusals:
        r.add(reason, f"ns/pod-{pod}", f"why {reason} {pod}")
    rows = r.rows()
    reasons = {reason for reason, _ in refusals}
    assert r.total == len(refusals) == sum(n for _, _, n, _ in rows)
    assert len(rows) <= MAX_REFUSAL_GROUPS + len(reasons)  # at most one overflow per reason
    assert all(sender == OTHER_SENDERS or detail == f"why {reason} {sender[7:]}"
               for reason, sender, _, detail in rows)
    assert [n for _, _, n, _ in rows] == sorted((n for _, _, n, _ in rows), reverse=True)


def test_a_sparkline_has_one_cell_per_point_from_the_lowest_to_the_highest_block() -> None:
    from tidings.cli.taskrender import SPARK_ASCII, SPARK_BLOCKS, sparkline

    assert sparkline([3.0, 2.0, 1.0, 0.0]) == "█▆▃▁"
    assert sparkline([0.0, 1.0], ascii_only=True) == SPARK_ASCII[0] + SPARK_ASCII[-1]
    assert sparkline([5.0]) == sparkline([2.0, 2.0])[:1] == SPARK_BLOCKS[3]  # flat: middle
    assert sparkline([]) == "" and len(sparkline(list(map(float, range(100))))) == 32
    assert set(sparkline([1e-300, 1e300, -1e300])) <= set(SPARK_BLOCKS)


@pytest.mark.parametrize(("encoding", "blocks"), [("utf-8", True), ("ascii", False),
                                                  ("latin-1", False)])
def test_state_draws_each_metrics_curve_in_blocks_or_ascii(encoding: str, blocks: bool) -> None:
    """``tidings state``: MIN, MAX and a HISTORY sparkline per metric; a terminal whose
    encoding has no block characters gets ASCII levels instead of mojibake."""
    import io

    from rich.console import Console

    from tidings.cli.snapshot import SOURCE_CR, Snapshot
    from tidings.cli.taskrender import SPARK_ASCII, SPARK_BLOCKS, render
    from tidings.schemas import TaskRef

    status = {"schemaVersion": 2, "phase": "Running", "metrics": {"loss": {
        "value": 0.25, "step": 30, "at": "2026-11-30T03:00:00.000000Z " + "a" * 32 + " 3",
        "events": 3, "min": 0.125, "max": 2.0,
        "history": {"shift": 0, "steps": [0, 10, 20, 30], "values": [2.0, 1.0, 0.125, 0.25]}}}}
    state = decode_status(TaskRef("ml", "run-7"), status)

    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding=encoding)  # strict: a block would raise here
    Console(file=out, width=120, color_system=None).print(render(Snapshot(state, SOURCE_CR)))
    out.flush()
    text = raw.getvalue().decode(encoding)
    (row,) = [ln.replace("|", " ") for ln in text.splitlines() if "loss" in ln]
    spark = "█▄▁▁" if blocks else SPARK_ASCII[-1] + SPARK_ASCII[3] + SPARK_ASCII[0] * 2
    assert row.split()[:6] == ["loss", "0.25", "30", "0.125", "2", spark], row
    assert any(c in row for c in SPARK_BLOCKS) is blocks


@pytest.mark.parametrize(("given", "hoisted"), [
    (["-n", "ml", "list"], ["list", "-n", "ml"]),
    (["--kubeconfig", "F", "get", "T"], ["get", "T", "--kubeconfig", "F"]),
    (["-nml", "--context=c", "-A", "state", "t", "-o", "json"],
     ["state", "t", "-o", "json", "-nml", "--context=c", "-A"]),
    (["--namespace=ml", "emit", "metric", "loss", "--", "-0.5"],
     ["emit", "metric", "loss", "--namespace=ml", "--", "-0.5"]),
    (["list", "-n", "ml"], ["list", "-n", "ml"]),  # already after: untouched
    (["--version"], ["--version"]), (["-n", "ml"], ["-n", "ml"]),
])
def test_kubectl_s_global_flags_may_come_before_the_command(given: list[str],
                                                            hoisted: list[str]) -> None:
    from tidings.cli.common import hoist_global_flags

    assert hoist_global_flags(given) == hoisted


def test_a_global_flag_before_the_command_reaches_it(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # `tidings --kubeconfig F get T` said "No such option" before: now it reads F (which does
    # not exist, so the error names it), exactly as `tidings get T --kubeconfig F` does.
    missing = str(tmp_path / "nope.yaml")
    before = CliRunner().invoke(app, ["--kubeconfig", missing, "get", "t"])
    after = CliRunner().invoke(app, ["get", "t", "--kubeconfig", missing])
    assert "No such option" not in before.stderr
    assert (before.exit_code, before.stderr) == (after.exit_code, after.stderr)
    assert missing in before.stderr, before.stderr
    res = CliRunner().invoke(app, ["-n", "Bad_NS", "list"])
    assert res.exit_code == 2 and "namespace 'Bad_NS'" in res.stderr, res.stderr
