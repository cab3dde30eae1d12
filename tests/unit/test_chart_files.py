"""The Helm chart holds real files, no symbolic links (helm warns about each one, and a
packaged chart cannot carry them), and its copies of the kustomize base's files stay byte for
byte equal to them; its values schema takes the log levels the watcher takes, in any case."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tidings.watcher.logs import LogLevel

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart"
# chart copy -> the file of the kustomize base (or of deploy/monitoring) it copies.
COPIES = {
    "crds/taskfeedbacks.tidings.dev.yaml": "deploy/crd.yaml",
    "files/admission-policy.yaml": "deploy/admission-policy.yaml",
    "files/alerts.yaml": "deploy/monitoring/alerts.yaml",
    "files/dashboard.json": "deploy/monitoring/dashboard.json",
}


def test_the_chart_has_no_symbolic_links() -> None:
    links = [str(p.relative_to(ROOT)) for p in CHART.rglob("*") if p.is_symlink()]
    assert links == []


@pytest.mark.parametrize(("copy", "source"), list(COPIES.items()))
def test_chart_copies_equal_their_source(copy: str, source: str) -> None:
    assert (CHART / copy).read_bytes() == (ROOT / source).read_bytes(), \
        f"deploy/chart/{copy} differs from {source}: cp {source} deploy/chart/{copy}"


def test_every_file_the_chart_reads_is_a_checked_copy() -> None:
    used = set()
    for template in (CHART / "templates").glob("*"):
        used |= set(re.findall(r'Files\.Get "([^"]+)"', template.read_text()))
    assert used <= set(COPIES), used - set(COPIES)
    assert {str(p.relative_to(CHART)) for p in (CHART / "crds").glob("*")} <= set(COPIES)


def test_the_log_level_schema_is_the_watchers_in_any_case() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    pattern = re.compile(schema["properties"]["watcher"]["properties"]["logLevel"]["pattern"])
    for level in LogLevel:
        for spelling in (level.value, level.value.upper(), level.value.title()):
            assert pattern.search(spelling), spelling
    for bad in ("critical", "verbose", "", "info ", "debugging"):
        assert not pattern.search(bad), bad
