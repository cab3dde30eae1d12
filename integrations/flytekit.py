"""flytekit reporting through flytekit's own task-decorator extension point (``ClassDecorator``,
the one its W&B and MLflow plugins use): the task's deck, its execution's links and its
outcome. Imports flytekit; nothing else in tidings does.

    @task(enable_deck=True)
    @tidings_report
    def train(...): ...
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urlsplit

# The frameworks are not in make lint's venv: their names are Any there (hence the ignores).
from flytekit import current_context  # type: ignore[import-not-found, unused-ignore]
from flytekit.core.utils import ClassDecorator  # type: ignore[import-not-found, unused-ignore]
from flytekit.deck.deck import DECK_FILE_NAME  # type: ignore[import-not-found, unused-ignore]

from tidings.emitter import Emitter, get_emitter
from tidings.emitter.outcome import report_failure
from tidings.schemas.wire.payloads import DECK_SCHEMES

from .report import mlflow_active_run_url, wandb_run_url

__all__ = ["FLYTE_CONSOLE_URL_ENV", "tidings_report"]

#: The Flyte console's public address (``https://flyte.example.com``): with it, each task
#: run links its execution's page. Flyte tells a task its execution id, not the console's
#: address, so without it there is no such link.
FLYTE_CONSOLE_URL_ENV = "TIDINGS_FLYTE_CONSOLE_URL"


class tidings_report(ClassDecorator):  # type: ignore[misc, unused-ignore]  # flytekit's style
    """Report a flytekit task over the bus.

    As the task function returns: its deck as a DeckReady named after the task, at the
    ``deck.html`` flytekit uploads next to the task's outputs (only when that is a blob-store
    or web URI: a local run's deck is a file on this machine, which no reader can open); the
    execution's console page (``$TIDINGS_FLYTE_CONSOLE_URL``) and any W&B or MLflow run it
    made as LogLinks; then the worker's final. An exception is a failed final naming it
    (and propagates, as flytekit expects). ``emitter=`` picks another Emitter.
    """

    def __init__(self, task_function: Any = None, emitter: Emitter | None = None,
                 **kwargs: Any) -> None:
        super().__init__(task_function, emitter=emitter, **kwargs)
        self.emitter = emitter

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        em = self.emitter if self.emitter is not None else get_emitter()
        try:
            result = self.task_function(*args, **kwargs)
        except BaseException as e:
            _send_links(em)
            report_failure(e, em)
            raise
        _send_links(em)
        _send_deck(em, self.task_function)
        em.progress(1.0, "", final=True)
        return result

    def get_extra_config(self) -> dict[str, str]:
        return {}


def _send_links(em: Emitter) -> None:
    try:
        for name, url in (("flyte", _console_url()), ("wandb", wandb_run_url()),
                          ("mlflow", mlflow_active_run_url())):
            if url:
                em.log_link(name, url)
    except Exception:  # the task's outcome matters more than its links
        pass


def _console_url() -> str | None:
    base = os.environ.get(FLYTE_CONSOLE_URL_ENV, "").strip().rstrip("/")
    if not base.startswith(("https://", "http://")):
        return None
    ex = current_context().execution_id
    if not (ex.project and ex.domain and ex.name) or ex.project == "local":
        return None  # a local run has no execution to show
    project, domain, name = (quote(str(s), safe="") for s in (ex.project, ex.domain, ex.name))
    return f"{base}/console/projects/{project}/domains/{domain}/executions/{name}"


def _send_deck(em: Emitter, fn: Any) -> None:
    try:
        params = current_context()
        if not getattr(params, "enable_deck", False) or not params.decks:
            return
        prefix = params.output_metadata_prefix or ""
        if urlsplit(prefix).scheme not in DECK_SCHEMES:
            return
        name = getattr(fn, "__name__", "") or "deck"
        em.deck_ready(name, f"{prefix.rstrip('/')}/{DECK_FILE_NAME}")
    except Exception:
        pass
