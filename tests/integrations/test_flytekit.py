"""flytekit tasks decorated with ``@tidings_report``, run by flytekit's local execution (as
``pyflyte run`` does, and in task-execution mode as ``pyflyte-execute`` sets it up in a
Flyte pod), reporting to a real watcher."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flytekit import Deck, task, workflow
from flytekit.bin.entrypoint import setup_execution
from flytekit.core.type_engine import TypeEngine
from flytekit.deck.deck import DECK_FILE_NAME

import tidings.emitter
from tests.cluster.support_watcher import task_status
from tests.integrations.conftest import TaskPod
from tests.support import eventually
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import KubeTransport, connect
from tidings.integrations.flytekit import FLYTE_CONSOLE_URL_ENV, tidings_report

pytestmark = pytest.mark.cluster


@task(enable_deck=True)
@tidings_report
def train(x: int) -> int:
    Deck("metrics", "<b>accuracy 0.93</b>")
    tidings.emitter.progress(0.5, "half way")
    return x + 1


@task
@tidings_report
def broken(x: int) -> int:
    tidings.emitter.progress(0.5, "half way")
    if x > 0:
        raise ValueError(f"bad batch {x}\x1b[2J")
    return x  # flytekit reads the source for a return statement


@workflow
def pipeline(x: int) -> int:
    return train(x=x)


@pytest.fixture
def bus(task_pod: TaskPod, kubeconfig: Path, start_watcher: Callable[..., Any]
        ) -> Iterator[tuple[str, Emitter]]:
    """This process as the task's worker pod: the default Emitter speaks for it."""
    start_watcher()
    task_name, env = task_pod()
    em = Emitter(EmitterConfig(retry_initial_s=0.05), identity=Identity.from_env(env),
                 transport=KubeTransport(connect(str(kubeconfig))))
    old = tidings.emitter.set_emitter(em)
    yield task_name, em
    tidings.emitter.set_emitter(old)
    em.close(5)


def over(admin: Any, namespace: str, name: str) -> dict[str, Any] | None:
    s = task_status(admin, namespace, name)
    return s if s and s.get("phase") in ("Succeeded", "Failed") else None


def test_a_local_workflow_run_reports_its_outcome_and_no_unopenable_deck(
        bus: tuple[str, Emitter], admin: Any, namespace: str) -> None:
    name, em = bus
    assert pipeline(x=1) == 2
    assert em.flush(15), em.stats()
    status = eventually(lambda: over(admin, namespace, name), 30, f"{name} over")
    assert status["phase"] == "Succeeded" and status["progress"]["percent"] == 100
    # A local run's deck is a file on this machine: no DeckReady a reader could not open.
    assert not status.get("decks") and not status.get("links"), status


def test_a_task_execution_reports_its_deck_uri_and_its_execution_page(
        bus: tuple[str, Emitter], admin: Any, namespace: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    name, em = bus
    monkeypatch.setenv("FLYTE_INTERNAL_EXECUTION_PROJECT", "flytesnacks")
    monkeypatch.setenv("FLYTE_INTERNAL_EXECUTION_DOMAIN", "development")
    monkeypatch.setenv("FLYTE_INTERNAL_EXECUTION_ID", "a1b2c3d4")
    monkeypatch.setenv(FLYTE_CONSOLE_URL_ENV, "https://flyte.example.com/")
    metadata = "s3://flyte-meta/metadata/propeller/a1b2c3d4/n0/data/0"
    with setup_execution(raw_output_data_prefix=str(tmp_path / "raw"),
                         output_metadata_prefix=metadata) as ctx:
        inputs = TypeEngine.dict_to_literal_map(ctx, {"x": 1}, {"x": int})
        train.dispatch_execute(ctx, inputs)
    assert em.flush(15), em.stats()
    status = eventually(lambda: (s := over(admin, namespace, name)) and s.get("decks") and s,
                        30, f"{name} over with its deck")
    assert status["phase"] == "Succeeded"
    assert status["decks"]["train"]["uri"] == f"{metadata}/{DECK_FILE_NAME}"
    assert status["links"]["flyte"]["url"] == (
        "https://flyte.example.com/console/projects/flytesnacks/domains/development"
        "/executions/a1b2c3d4")


def test_a_failing_task_is_a_failed_final_naming_the_exception(
        bus: tuple[str, Emitter], admin: Any, namespace: str) -> None:
    name, em = bus
    with pytest.raises(Exception, match="bad batch 7"):
        broken(x=7)
    assert em.flush(15), em.stats()
    status = eventually(lambda: over(admin, namespace, name), 30, f"{name} over")
    assert status["phase"] == "Failed" and status["progress"]["percent"] == 50
    (worker,) = status["workers"]
    assert worker["message"] == "ValueError: bad batch 7", worker
