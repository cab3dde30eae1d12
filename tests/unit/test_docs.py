"""The docs a newcomer reads first say each thing once and name commands that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The README, the reference pages it points to (one per part, docs/), the architecture and
# the install guide: everything a reader of the checkout is sent to.
DOCS = ("README.md", "ARCHITECTURE.md", "deploy/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))


def paragraphs(text: str) -> list[str]:
    """Prose paragraphs (code blocks and tables left out), whitespace-normalised."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    out = []
    for block in re.split(r"\n\s*\n", text):
        if block.lstrip().startswith(("|", "#")):
            continue
        words = " ".join(block.split())
        if len(words) > 40:  # short lines ("Chart values: ...") may repeat on purpose
            out.append(words)
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_no_paragraph_is_said_twice(doc: str) -> None:
    seen: set[str] = set()
    for para in paragraphs((ROOT / doc).read_text()):
        assert para not in seen, f"{doc} repeats: {para[:80]}..."
        seen.add(para)


@pytest.mark.parametrize("doc", DOCS)
def test_no_sentence_is_said_twice(doc: str) -> None:
    # The deploy/README.md duplicate ("The policy is compiled asynchronously...") was the
    # tail of one paragraph and a paragraph of its own: compare sentences too.
    sentences: dict[str, int] = {}
    for para in paragraphs((ROOT / doc).read_text()):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", para):
            if len(sentence) > 60:
                sentences[sentence] = sentences.get(sentence, 0) + 1
    repeated = [s for s, n in sentences.items() if n > 1]
    assert not repeated, f"{doc} repeats: {repeated}"


@pytest.mark.parametrize("doc", DOCS)
def test_no_doc_points_outside_the_repository(doc: str) -> None:
    # A reader of the checkout (or of the package page) has nothing beside it.
    # A page in docs/ may link up to the README; nothing may lead out of the checkout.
    text = (ROOT / doc).read_text()
    base = (ROOT / doc).parent
    paths = re.findall(r"`(\.\./[^`]*)`|\]\((\.\./[^)#]*)", text)
    outside = [p for pair in paths for p in pair
               if p and not (base / p).resolve().is_relative_to(ROOT)]
    outside += re.findall(r"\.\./shared\b", text)
    assert outside == [], outside


def test_no_file_points_outside_the_repository() -> None:
    # Code, tests and tools too: a path beside the checkout is not there for its reader.
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    pointing = []
    for name in tracked:
        path = ROOT / name
        if name == "tests/unit/test_docs.py" or path.suffix not in {
                ".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg", ""}:
            continue
        if path.is_file() and re.search(r"\.\./shared\b", path.read_text(errors="replace")):
            pointing.append(name)
    assert pointing == [], pointing


def test_the_readme_is_what_a_newcomer_reads_first() -> None:
    # The reference lives in docs/; the README keeps what a newcomer needs first, and its
    # first command block is the two commands (`.ci/run` runs the second, `make test`).
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    first = re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL)[0]
    assert [line.split("#")[0].strip() for line in first.splitlines()] == ["make demo", "make test"]
    assert re.search(r"^make test\b", (ROOT / ".ci/run").read_text(), flags=re.MULTILINE)
    for page in DOCS[3:]:
        assert f"]({page})" in readme, f"the README does not point to {page}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return re.findall(r"^#+ (.*)$", text, flags=re.MULTILINE)


@pytest.mark.parametrize("doc", DOCS)
def test_every_link_reaches_its_file_and_heading(doc: str) -> None:
    # Pages moved into docs/ link to each other and back: a link to a file that is not
    # there, or to a heading renamed since, sends a reader nowhere.
    source = ROOT / doc
    text = re.sub(r"```.*?```", "", source.read_text(), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # another site's page: not ours to check
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists() or (anchor and anchor not in {slug(h) for h in headings(file)}):
            broken.append(target)
    assert broken == [], f"{doc}: {broken}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_named_section_exists(doc: str) -> None:
    # Prose names another doc's section in quotes (`deploy/README.md`, "TTL for finished
    # tasks"): the name must open one of that doc's headings or bold lead-ins.
    text = " ".join((ROOT / doc).read_text().split())
    missing = []
    for path, name in re.findall(r"`?((?:deploy/|docs/)?[\w-]+\.md)`?, \"([^\"]+)\"", text):
        target = ROOT / path
        assert target.exists(), f"{doc} names {path}"
        leads = headings(target) + re.findall(r"^- \*\*(.*?)\*\*", target.read_text(),
                                              flags=re.MULTILINE)
        if not any(lead.replace("`", "").startswith(name.replace("`", "")) for lead in leads):
            missing.append(f"{path}, {name!r}")
    assert missing == [], f"{doc}: {missing}"


def recipe_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("<!-- try-it: begin", 1)[1].split("<!-- try-it: end -->", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return str(block)


def test_the_recipe_wires_nothing_but_a_rolebinding_and_a_label() -> None:
    # With zero wiring the workload needs its ServiceAccount bound to
    # tidings-workload and a pod whose labels name its task; the process learns the rest.
    import yaml

    from tidings.schemas.wire.platform import DEFAULT_TASK_KEYS

    docs = list(yaml.safe_load_all((ROOT / "deploy/examples/local-pod.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    assert sorted(by_kind) == ["Pod", "RoleBinding", "ServiceAccount"]
    assert by_kind["RoleBinding"]["roleRef"]["name"] == "tidings-workload"
    assert by_kind["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": by_kind["ServiceAccount"]["metadata"]["name"]}]
    pod = by_kind["Pod"]
    assert pod["spec"]["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"]
    assert set(pod["metadata"]["labels"]) & set(DEFAULT_TASK_KEYS)
    assert all("env" not in c and "envFrom" not in c for c in pod["spec"]["containers"])
    assert "volumes" not in pod["spec"]  # no downward-API labels file either
    block = recipe_block()
    for wiring in ("POD_NAME", "POD_NAMESPACE", "POD_UID", "TIDINGS_TASK", "/etc/podinfo"):
        assert wiring not in block, wiring


def tidings_invocations(text: str) -> list[str]:
    """Each `tidings ...` the text names: inline code spans and lines of its code blocks
    (without their comments)."""
    spans = re.findall(r"`(tidings [^`]*)`", text)
    for block in re.findall(r"```(?:sh|console)?\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            line = line.removeprefix("$ ").split(" #", 1)[0].strip()
            if line.startswith("tidings "):
                spans.append(line)
    return spans


def test_every_tidings_command_and_flag_the_docs_name_exists() -> None:
    # A doc naming `tidings emit final` or `tidings lineage -w` sends a reader to an error.
    from typer.main import get_command

    from tidings.cli.common import hoist_global_flags
    from tidings.cli.main import app

    root = get_command(app)
    checked = 0
    for doc in DOCS:
        for call in tidings_invocations((ROOT / doc).read_text()):
            # kubectl's global flags may come before the command: read as after it.
            words = hoist_global_flags(call.split()[1:])
            cmd: Any = root  # typer's own click: a group has `commands`
            while words and hasattr(cmd, "commands") and not words[0].startswith("-"):
                sub = cmd.commands.get(words[0])
                assert sub is not None, f"{doc}: `{call}`: no command {words[0]!r}"
                cmd, words = sub, words[1:]
            known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", " ".join(words)):
                assert flag in known, f"{doc}: `{call}`: {cmd.name} has no {flag}"
            checked += 1
    assert checked > 30  # the docs name many; a parse that finds none proves nothing


ARCHITECTURE_FOLDERS = ("schemas", "watcher", "cli", "emitter", "ui", "kube")


@pytest.mark.parametrize("folder", ARCHITECTURE_FOLDERS)
def test_the_architecture_names_every_module(folder: str) -> None:
    """A module ARCHITECTURE.md does not name is one a newcomer cannot place: each is named
    by its path or its file name (a name two folders share, such as `config.py`, is found
    once for both: the step that names it says which folder)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    unnamed = [path.name for path in sorted((ROOT / folder).glob("*.py"))
               if path.name != "__init__.py"
               and f"{folder}/{path.name}" not in text and f"`{path.name}`" not in text
               and f" {path.name}" not in text]
    assert unnamed == [], f"ARCHITECTURE.md does not name {folder}/: {unnamed}"
