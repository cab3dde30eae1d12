"""The code-quality bar is part of the suite: ruff everywhere, mypy --strict on schemas, kube,
emitter, watcher, cli, ui and integrations, and the dependency rules: schemas and the emitter
import nothing of the parts above them, the web page nothing of the watcher, no shipped code
imports the kubernetes client, and a framework only its own integration module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_is_clean() -> None:
    result = run(str(BIN / "ruff"), "check", "schemas", "kube", "emitter", "watcher", "cli",
                 "ui", "integrations", "tidings", "tests", "bench", "tools")
    assert result.returncode == 0, result.stdout + result.stderr


CHECKED = ("schemas", "kube", "emitter", "watcher", "cli", "ui", "integrations")


def test_mypy_strict_is_clean() -> None:
    # Over the installed names (tidings.schemas, ...), as `make lint` runs it.
    targets = [a for p in CHECKED for a in ("-p", f"tidings.{p}")]
    result = run(str(BIN / "mypy"), *targets, "-m", "tools.devcluster")
    assert result.returncode == 0, result.stdout + result.stderr


def test_static_tools_resolve_every_package_from_any_directory(tmp_path: Path) -> None:
    # tidings/ links each top-level folder, and the editable install is a plain path entry:
    # mypy (and editors) find tidings.* outside the checkout with no import hook or built tree.
    for pkg in CHECKED:
        link = ROOT / "tidings" / pkg
        assert link.is_symlink() and link.resolve() == ROOT / pkg, pkg
    targets = [a for p in CHECKED for a in ("-p", f"tidings.{p}")]
    result = subprocess.run([str(BIN / "mypy"), "--strict", "--no-incremental", *targets],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def imports_of(folder: str, *names: str) -> list[str]:
    """The import lines under ``folder`` that name any of ``names``."""
    return [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in (ROOT / folder).rglob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith(("import ", "from ")) and any(n in line for n in names)
    ]


def test_schemas_import_nothing_else_of_ours() -> None:
    assert imports_of("schemas", "tidings.emitter", "tidings.watcher", "tidings.cli",
                      "kubernetes") == []


# The core's layers, bottom first: each imports only the layers below it (and itself).
SCHEMA_LAYERS = ("wire", "engine", "status", "view")


def schema_imports(path: Path) -> set[str]:
    """The tidings.schemas modules one schemas module imports, as dotted names under
    tidings.schemas (relative imports resolved), read from its syntax tree."""
    import ast

    here = path.relative_to(ROOT / "schemas").with_suffix("").parts
    package = here[:-1]  # a module's package, and an __init__'s own
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                module = ".".join((*base, *(node.module.split(".") if node.module else ())))
            elif node.module and node.module.startswith("tidings.schemas"):
                module = node.module.removeprefix("tidings.schemas").lstrip(".")
            else:
                continue
            found |= {f"{module}.{a.name}".lstrip(".") for a in node.names} | {module}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("tidings.schemas").lstrip(".") for a in node.names
                      if a.name.startswith("tidings.schemas.")}
    return found


def test_the_core_layers_import_only_downwards() -> None:
    # wire <- engine <- status <- view: the picture of the core is its folders.
    assert {p.name for p in (ROOT / "schemas").iterdir() if p.is_dir()
            and p.name != "__pycache__"} == set(SCHEMA_LAYERS)
    upward = []
    for rank, layer in enumerate(SCHEMA_LAYERS):
        for path in sorted((ROOT / "schemas" / layer).rglob("*.py")):
            for name in sorted(schema_imports(path)):
                top = name.split(".")[0]
                if top in SCHEMA_LAYERS and SCHEMA_LAYERS.index(top) > rank:
                    upward.append(f"{path.relative_to(ROOT)} imports {name}")
    assert upward == []
    # Every module lives in a layer: only the package's front door sits at the top.
    assert sorted(p.name for p in (ROOT / "schemas").glob("*.py")) == ["__init__.py"]


def test_the_emitter_imports_nothing_of_the_watcher_or_the_cli() -> None:
    # It runs inside workloads, which install neither (nor their extras).
    assert imports_of("emitter", "tidings.watcher", "tidings.cli") == []


def test_the_page_imports_nothing_of_the_watcher() -> None:
    # tidings.ui reads with the CLI's readers; the CLI's --from-events fold (cli/taskread.py,
    # followed by cli/taskfollow.py) checks senders with the watcher's code, so the page reads
    # the status alone, never through it.
    local_fold = ("tidings.cli.taskread", "tidings.cli.taskfollow")
    assert imports_of("ui", "tidings.watcher", *local_fold) == []
    code = ("import sys, tidings.ui.server, tidings.ui.pages, tidings.ui.logs\n"
            "print(sorted(m for m in sys.modules if m.startswith('tidings.watcher')\n"
            f"             or m in {local_fold!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


SHIPPED = ("schemas", "kube", "emitter", "watcher", "cli", "ui", "integrations", "tidings")


def test_no_shipped_code_imports_the_kubernetes_client() -> None:
    # The plain install has no kubernetes client (and kfp pins it below 31); only the tests
    # use it, as their admin client.
    offenders = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for folder in SHIPPED for path in (ROOT / folder).rglob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith(("import kubernetes", "from kubernetes"))
    ]
    assert offenders == []


FRAMEWORKS = ("torch", "transformers", "lightning", "flytekit", "wandb", "mlflow")


def test_a_framework_is_imported_only_by_its_own_integration() -> None:
    # `import tidings` must never import torch: each framework appears in exactly one module,
    # tidings.integrations.<framework>, which only its users import.
    found = sorted(
        (str(path.relative_to(ROOT)), words[1].split(".")[0])
        for folder in SHIPPED for path in (ROOT / folder).rglob("*.py")
        for line in path.read_text().splitlines()
        if (words := line.split()) and words[0] in ("import", "from") and len(words) > 1
        and words[1].split(".")[0] in FRAMEWORKS
    )
    assert sorted(set(found)) == [("integrations/flytekit.py", "flytekit"),
                                  ("integrations/lightning.py", "lightning"),
                                  ("integrations/transformers.py", "transformers")], found


def test_the_workload_path_imports_nothing_heavy() -> None:
    code = ("import sys, tidings.emitter, tidings.kube, tidings.emitter.otel\n"
            "from tidings.emitter.transport import default_transport\n"
            "default_transport()\n"
            "print(sorted(m for m in ('kubernetes', 'typer', 'rich', 'prometheus_client',"
            " 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_emitter_and_its_calls_load_no_payload_model_on_the_workload_s_path() -> None:
    """`import tidings.emitter` (at most 0.15 s of CPU, bench/bench_cli_startup.py)
    and the workload's calls load neither pydantic nor the payload models, the sender or the
    Kubernetes client: the sender thread does, when it starts."""
    heavy = ("pydantic", "tidings.schemas.wire.payloads", "tidings.schemas.wire.event",
             "tidings.emitter.sender", "tidings.kube", "tenacity", "urllib3", "yaml", "orjson")
    code = ("import sys, tidings.emitter as t\n"
            "from tidings.emitter import Emitter, Identity\n"
            "em = Emitter(identity=Identity(namespace='ns', pod_name='p', pod_uid='u', "
            "task='t'), autostart=False)\n"
            "em.log_link('w', 'https://w.example/'); em.progress(0.5); em.metric('loss', 1.0)\n"
            "em.record_span('s', 1.0, 2.0); em.progress(1.0, final=True); em.log_link(1, 2)\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_watcher_image_copies_every_package_folder() -> None:
    import tomllib

    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]
    # A sub-package (tidings.schemas.wire) lives inside its top-level folder's copy.
    folders = {p.split(".")[1] if "." in p else p for p in packages}
    assert {"tidings", "schemas", "kube", "emitter"} <= folders
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert [f for f in sorted(folders) if f"COPY {f}/ {f}/" not in dockerfile] == []
