"""What the watcher knows of platform tasks (a Job, JobSet, TrainJob, Workflow named by its
pods' labels): the object that owns each task's TaskFeedback, and a batch/v1 Job's
``spec.completions``, the task's worker count (read from the Job, cached)."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from tidings.kube import Client, KubeError
from tidings.schemas.constants import WORKERS_MAX
from tidings.schemas.event import ObjectRef, TaskRef
from tidings.schemas.platform import PodTask

from .senders import Retry

log = logging.getLogger("tidings.watcher.platform")

# Tasks whose platform object is remembered (beyond: the oldest is forgotten, and a
# TaskFeedback created after that is simply unowned).
MAX_TASKS = 50_000
# How long a Job's completions (or its absence) is trusted before it is read again.
JOB_TTL_S = 60.0


def job_path(namespace: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"


class PlatformTasks:
    """Thread-safe: the fold workers learn, the status writers ask for owners."""

    def __init__(self, kube: Client | None) -> None:
        self.kube = kube
        self._lock = threading.Lock()
        self._tasks: OrderedDict[TaskRef, PodTask] = OrderedDict()
        self._jobs: dict[tuple[str, str], tuple[float, int | None, str]] = {}
        self._warned = False

    def learn(self, task: TaskRef, info: PodTask) -> None:
        """A pod of ``task`` showed ``info`` (its owner, its Job); the first owner seen stays."""
        if info.owner is None and not info.job:
            return
        with self._lock:
            if task in self._tasks:
                return
            self._tasks[task] = info
            while len(self._tasks) > MAX_TASKS:
                self._tasks.popitem(last=False)

    def owner(self, task: TaskRef) -> ObjectRef | None:
        """The platform object the TaskFeedback of ``task`` is created owned by, if known."""
        with self._lock:
            info = self._tasks.get(task)
        return info.owner if info is not None else None

    def completions(self, task: TaskRef, info: PodTask) -> int | Retry | None:
        """The Job's ``spec.completions`` (at most WORKERS_MAX), None when it has none, is
        not the Job the pod names (another uid), or cannot be read (forbidden, gone);
        Retry.LATER when the API cannot answer now."""
        key = (task.namespace, info.job)
        now = time.monotonic()
        with self._lock:
            cached = self._jobs.get(key)
        if cached is None or cached[0] <= now:
            read = self._read(task.namespace, info.job)
            if read is Retry.LATER:
                return Retry.LATER
            assert not isinstance(read, Retry)
            cached = (now + JOB_TTL_S, *read)
            with self._lock:
                if len(self._jobs) >= MAX_TASKS:
                    self._jobs = {k: v for k, v in self._jobs.items() if v[0] > now}
                self._jobs[key] = cached
        _, completions, uid = cached
        owner = info.owner
        if owner is not None and owner.kind == "Job" and uid and owner.uid != uid:
            return None  # a Job of that name, but not the one the pod belongs to
        return completions

    def _read(self, namespace: str, name: str) -> tuple[int | None, str] | Retry:
        if self.kube is None:
            return None, ""
        try:
            job: Any = self.kube.request("GET", job_path(namespace, name), timeout=(3, 10))
        except KubeError as e:
            if e.retryable:
                return Retry.LATER
            if not e.not_found and not self._warned:
                self._warned = True
                log.warning("cannot read Job %s/%s (%s): Job pods' tasks complete when every "
                            "reporting pod is final (grant get on batch jobs, deploy/rbac.yaml)",
                            namespace, name, e)
            return None, ""
        spec = job.get("spec") if isinstance(job, dict) else None
        meta = job.get("metadata") if isinstance(job, dict) else None
        raw = spec.get("completions") if isinstance(spec, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        completions = min(raw, WORKERS_MAX) if type(raw) is int and raw > 0 else None
        return completions, uid if isinstance(uid, str) else ""
