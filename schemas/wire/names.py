"""The naming rules, one definition each for the library, `tidings emit`, the CLI, the page and
the watcher: object names (DNS-1123 subdomains), namespace names (DNS-1123 labels) and task ids.

A task id is both the TaskFeedback's object name (a DNS-1123 subdomain) and the value of the
pod label ``tidings.dev/task`` (at most 63 characters of ``[A-Za-z0-9._-]``, alphanumeric at
both ends). Only the intersection works for both: lowercase letters, digits, '-' and '.',
at most 63 characters, each dot-separated part starting and ending with a letter or digit.
"""

from __future__ import annotations

import re

from .constants import TASK_ID_MAX

# A DNS-1123 subdomain: what the API server accepts as an object name (pods, TaskFeedbacks).
_OBJECT_NAME = re.compile(r"^[a-z0-9]([a-z0-9.\-]{0,251}[a-z0-9])?\Z")
# A DNS-1123 label: what the API server accepts as a namespace name.
_NAMESPACE = re.compile(r"^[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?\Z")
_TASK_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")

TASK_ID_RULE = (
    f"lowercase letters, digits, '-' and '.', at most {TASK_ID_MAX} characters, starting and "
    "ending with a letter or digit"
)


def task_id_error(task: object) -> str | None:
    """None when ``task`` is a valid task id, else a one-line reason (input quoted, bounded)."""
    if not isinstance(task, str):
        return "task id is not a string"
    if len(task) <= TASK_ID_MAX and _TASK_ID.match(task):
        return None
    shown = task[:80].encode("unicode_escape").decode("ascii")
    return f"task id '{shown}' is not valid: {TASK_ID_RULE}"


def valid_task_id(task: object) -> bool:
    """True when ``task`` can be both a TaskFeedback name and a ``tidings.dev/task`` value."""
    return isinstance(task, str) and len(task) <= TASK_ID_MAX and bool(_TASK_ID.match(task))


def valid_object_name(name: str) -> bool:
    """True when ``name`` can name a Kubernetes object: a DNS-1123 subdomain (lowercase
    letters, digits, '-' and '.', at most 253 characters, alphanumeric at both ends)."""
    return bool(_OBJECT_NAME.match(name))


def valid_namespace(name: str) -> bool:
    """True when ``name`` can name a namespace: a DNS-1123 label (lowercase letters, digits
    and '-', at most 63 characters, alphanumeric at both ends)."""
    return bool(_NAMESPACE.match(name))
