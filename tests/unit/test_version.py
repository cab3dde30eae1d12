"""The version is the installed distribution's, and `tidings --version` prints it."""

from __future__ import annotations

from importlib import metadata

import pytest
from typer.testing import CliRunner

import tidings
from tidings.__main__ import main
from tidings.cli.main import app


def test_version_is_the_installed_distributions() -> None:
    assert tidings.__version__ == metadata.version("tidings")
    with pytest.raises(AttributeError):
        tidings.nosuch  # noqa: B018


def test_tidings_version(monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert (res.exit_code, res.output) == (0, f"tidings {tidings.__version__}\n")
    monkeypatch.setattr("sys.argv", ["tidings", "--version"])
    main()  # the console script's own path, which needs no CLI extra
    assert capsys.readouterr().out == f"tidings {tidings.__version__}\n"
