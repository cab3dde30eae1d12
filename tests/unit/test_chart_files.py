"""The Helm chart holds real files, no symbolic links (helm warns about each one, and a
packaged chart cannot carry them), and its copies of the kustomize base's files stay byte for
byte equal to them; its values schema takes the log levels the watcher takes, in any case."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

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
    # An enum, not a pattern: helm's error then lists the levels instead of a regex.
    schema = json.loads((CHART / "values.schema.json").read_text())
    levels = set(schema["properties"]["watcher"]["properties"]["logLevel"]["enum"])
    for level in LogLevel:
        for spelling in (level.value, level.value.upper(), level.value.title()):
            assert spelling in levels, spelling
    for bad in ("critical", "verbose", "", "info ", "debugging"):
        assert bad not in levels, bad


def test_every_values_object_is_closed_and_the_schema_knows_every_key() -> None:
    """A misspelt key (`--set watcher.wrtieInterval=1`) is refused, not ignored: every
    object of values.yaml is closed in the schema, and the schema knows every key."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: object, node: dict[str, Any], where: str) -> None:
        if not isinstance(value, dict) or "properties" not in node:
            return  # a free-form map (resources, labels, ...)
        assert node.get("additionalProperties") is False, where
        for key, sub in value.items():
            assert key in node["properties"], f"{where}.{key} has no schema"
            walk(sub, node["properties"][key], f"{where}.{key}")

    walk(values, schema, "values")

def test_the_notes_name_no_file_of_the_repository() -> None:
    # People read NOTES after `helm install` from a packaged chart: no checkout to look in.
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert not re.search(r"\b(deploy|examples|tools|tests)/", notes), notes
