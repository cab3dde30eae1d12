"""Pure parts of the CLI surface: the jsonpath template subset, --request-timeout parsing,
kubectl's ages, the list table, the missing-CRD test of a 404, and help text shown verbatim."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tidings._compat import UTC
from tidings.cli.common import CliError, parse_request_timeout
from tidings.cli.jsonpath import TemplateError, parse_template, render
from tidings.cli.kube import NO_CRD, Action, api_error, client_timeout, no_such_resource
from tidings.cli.list_cmd import header, row, table
from tidings.schemas.view import model as view
from tidings.schemas.wire.times import parse_time

DATA = {"kind": "List", "items": [
    {"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}},
     "status": {"phase": "Failed", "linkCount": 2, "ok": True}},
    {"metadata": {"name": "b"}, "status": {"phase": "Running", "linkCount": 0}}]}


@pytest.mark.parametrize(("template", "expected"), [
    ("{.items[*].metadata.name}", "a b"),
    ("{.items[0].status.phase}", "Failed"),
    ("{.items[-1:].metadata.name}", "b"),
    ('{.items[?(@.status.phase=="Running")].metadata.name}', "b"),
    ("{range .items[*]}{.metadata.name}:{.status.linkCount}{\"\\n\"}{end}", "a:2\nb:0\n"),
    ("{range .items}{.metadata.name},{end}", "a,b,"),
    ("{..phase}", "Failed Running"),
    ("{.items[0].metadata.labels['app.kubernetes.io/name']}", "x"),
    ("{.items[0].status.ok}", "true"),
    ("{.items[1].status}", '{"phase":"Running","linkCount":0}'),
    ("name={.kind} {.nothing}", "name=List "),  # missing keys print nothing, as kubectl get
    ('{"}"}', "}"),
])
def test_jsonpath_subset(template: str, expected: str) -> None:
    assert render(template, DATA) == expected


@pytest.mark.parametrize("bad", ["{.items[*}", "{", "}", "{range .items[*]}", "{end}",
                                 "{metadata.name}", "{}", '{"\\x"}'])
def test_jsonpath_refuses_what_it_cannot_do(bad: str) -> None:
    with pytest.raises(TemplateError):
        parse_template(bad)


@given(st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=40))
def test_jsonpath_literal_text_is_kept(text: str) -> None:
    assert render(text, DATA) == text


@pytest.mark.parametrize(("value", "seconds"), [
    ("0", 0.0), ("30", 30.0), ("30s", 30.0), ("1m", 60.0), ("1h30m", 5400.0),
    ("250ms", 0.25), (" 2m ", 120.0), ("0s", 0.0)])
def test_request_timeout_parses_kubectl_forms(value: str, seconds: float) -> None:
    assert parse_request_timeout(value) == seconds


@pytest.mark.parametrize("value", ["", "soon", "-1", "-5s", "1x", "s", "1.5", "30 s", "1m-"])
def test_request_timeout_refuses_the_rest(value: str) -> None:
    with pytest.raises(CliError) as err:
        parse_request_timeout(value)
    assert err.value.code == 2 and "--request-timeout" in err.value.message


def test_request_timeout_becomes_a_client_timeout() -> None:
    assert client_timeout(None) == (5.0, 30.0)  # the default: connect, read
    assert client_timeout("0") == (5.0, None)  # no limit on the answer
    assert client_timeout("1m") == 60.0  # a total, as kubectl's


def age(t: str | None, now: datetime | None = None) -> str:
    """The one age formatter (schemas/view/model.py) of a time as the status writes it."""
    return view.age(parse_time(t), now or datetime.now(UTC))


def eta(t: str | None, now: datetime) -> str:
    return view.eta_text(parse_time(t), now)


def test_ages_follow_kubectl() -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    for delta, text in [(timedelta(seconds=5), "5s"), (timedelta(seconds=119), "119s"),
                        (timedelta(minutes=3, seconds=20), "3m20s"),
                        (timedelta(minutes=30), "30m"), (timedelta(hours=4, minutes=5), "4h5m"),
                        (timedelta(hours=30), "30h"), (timedelta(days=3, hours=2), "3d2h"),
                        (timedelta(days=40), "40d"), (timedelta(days=800), "2y70d")]:
        assert age((now - delta).isoformat().replace("+00:00", "Z"), now) == text
    assert age(None) == "<unknown>" and age("garbage") == "<unknown>"
    assert age("2026-01-11T00:00:00Z", now) == "<invalid>"


def test_a_row_says_why_a_task_waits_or_failed() -> None:
    """The REASON column is status.reason, as kubectl's printer column shows it."""
    obj = {"metadata": {"name": "pull-missing", "namespace": "ns"},
           "status": {"phase": "Pending", "reason": "ImagePullBackOff"}}
    cells = row(obj, wide=False, namespaced=False, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert cells[:4] == ["pull-missing", "Pending", "<none>", "ImagePullBackOff"]
    assert header(False, False)[:4] == ["NAME", "PHASE", "PROGRESS", "REASON"]


def test_rows_show_missing_values_as_none_and_never_wrap() -> None:
    obj = {"metadata": {"name": "t", "namespace": "ns", "creationTimestamp":
                        "2026-01-01T00:00:00Z"}}
    cells = row(obj, wide=True, namespaced=True, now=datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    assert cells == ["ns", "t", "<none>", "<none>", "<none>", "<none>", "<none>", "<none>",
                     "<none>", "<none>", "<none>", "<none>", "60s"]
    # (the reason; wide: message, ETA, workers, health)
    long = ["x" * 300, "y"]
    text, widths = table([["A", "B"], long])
    assert text.splitlines()[1] == "x" * 300 + "   y" and widths == [300, 1]


def test_a_404_names_the_missing_crd_only_when_the_type_is_unknown() -> None:
    cr = Action("list", "taskfeedbacks.tidings.dev", "ns")
    unknown = b'{"kind":"Status","reason":"NotFound","details":{},"code":404}'
    missing = (b'{"kind":"Status","reason":"NotFound","details":{"name":"t",'
               b'"group":"tidings.dev","kind":"taskfeedbacks"},"code":404}')
    assert no_such_resource(unknown) and no_such_resource(b"404 page not found")
    assert not no_such_resource(missing)
    assert api_error(404, unknown, cr).message == NO_CRD
    err = api_error(404, missing, Action("get", "taskfeedbacks.tidings.dev", "ns", "t"))
    assert err.message == "not found: taskfeedbacks.tidings.dev 't'" and err.code == 5
    assert api_error(404, unknown, Action("get", "pods", "ns", "p")).message.startswith(
        "not found: pods")


def _commands(group: object, path: list[str]) -> list[list[str]]:
    out = [path]
    commands = getattr(group, "commands", None)
    if isinstance(commands, dict):
        for name, cmd in commands.items():
            out += _commands(cmd, [*path, name])
    return out


def test_every_help_text_is_shown_as_written() -> None:
    """No markup language eats text: every option's help appears verbatim (modulo line
    breaks) in its command's --help, brackets included."""
    import typer.main

    from tidings.cli.main import app

    root = typer.main.get_command(app)
    emit_help = CliRunner().invoke(app, ["emit", "progress", "--help"]).stdout
    assert "[env var: TIDINGS_TASK]" in " ".join(emit_help.split())
    for path in _commands(root, []):
        cmd = root
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        # Compared without whitespace: the formatter breaks lines (and after hyphens).
        shown = "".join(CliRunner().invoke(app, [*path, "--help"],
                                           terminal_width=100).stdout.split())
        for param in cmd.params:
            text = "".join((getattr(param, "help", None) or "").split())
            assert text in shown, (path, param.name, text)


def test_an_eta_that_passed_while_the_task_runs_reads_overdue_not_due_ago() -> None:
    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    at = (now + timedelta(seconds=200)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert eta(at, now) == "in 3m20s"
    assert eta(now.strftime("%Y-%m-%dT%H:%M:%SZ"), now) == "now"
    assert eta((now - timedelta(seconds=0.4)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), now) == "now"
    assert eta((now - timedelta(seconds=95)).strftime("%Y-%m-%dT%H:%M:%SZ"), now) == \
        "overdue 95s"
    assert eta(None, now) == "<none>"
