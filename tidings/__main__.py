"""The ``tidings`` console script: the CLI when the ``cli`` extra is installed, else a
one-line hint (a plain ``pip install tidings`` is the workload library only)."""

from __future__ import annotations

import sys

# What the CLI extra brings; a missing one of these means "install the extra", not a bug.
_CLI_DEPENDENCIES = {"typer", "click", "rich", "prometheus_client", "shellingham", "jsonpath_ng"}


def main() -> None:
    if sys.argv[1:] == ["--version"]:  # works in every install
        from tidings import __version__

        print(f"tidings {__version__}")
        return
    try:
        from tidings.cli.main import run
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in _CLI_DEPENDENCIES:
            raise
        print(f"error: the tidings command needs the CLI extra ({e.name} is missing): "
              "pip install 'tidings[cli]'", file=sys.stderr)
        sys.exit(1)
    run()


if __name__ == "__main__":
    main()
