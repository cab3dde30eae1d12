"""The one Kubernetes client layer of tidings (``tidings.kube``), shared by the emitter, the
watcher and the CLI: kubectl's kubeconfig semantics and in-cluster config (``config``),
renewable credentials (``auth``), one urllib3 client with pagination and watch-line reading
(``client``), one list+watch loop (``watch``), one error type and one retry rule
(``errors``).

Light on purpose (urllib3, orjson, PyYAML): it runs inside workload images.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidings._lazy import lazy_exports

if TYPE_CHECKING:
    from .auth import BoundPod, CredentialError, bound_pod
    from .client import (
        JSON,
        JSON_PATCH,
        MERGE_PATCH,
        METADATA_ONLY,
        STRATEGIC_MERGE_PATCH,
        Client,
        close_stream,
        iter_line_batches,
        iter_lines,
        paginate,
    )
    from .config import ClusterConfig, Impersonation, in_cluster, in_cluster_possible, load
    from .errors import (
        ConfigError,
        KubeError,
        StatusPredicates,
        is_expired,
        is_retryable_status,
        parse_retry_after,
    )
    from .watch import Change, Listing, ListWatch, Page, Rewatch, WatchLines


# Each name loads its module on first use (PEP 562): the emitter's workload thread imports
# the errors and the token bucket, and the client (urllib3, ssl) only on its sender thread.
_LAZY = {
    "BoundPod": "auth",
    "CredentialError": "auth",
    "bound_pod": "auth",
    "JSON": "client",
    "JSON_PATCH": "client",
    "MERGE_PATCH": "client",
    "METADATA_ONLY": "client",
    "STRATEGIC_MERGE_PATCH": "client",
    "Client": "client",
    "close_stream": "client",
    "iter_line_batches": "client",
    "iter_lines": "client",
    "paginate": "client",
    "ClusterConfig": "config",
    "Impersonation": "config",
    "in_cluster": "config",
    "in_cluster_possible": "config",
    "load": "config",
    "ConfigError": "errors",
    "KubeError": "errors",
    "StatusPredicates": "errors",
    "is_expired": "errors",
    "is_retryable_status": "errors",
    "parse_retry_after": "errors",
    "Change": "watch",
    "Listing": "watch",
    "ListWatch": "watch",
    "Page": "watch",
    "Rewatch": "watch",
    "WatchLines": "watch",
}



def connect(kubeconfig: str | None = None, context: str | None = None, *,
            namespace: str | None = None, impersonate: Impersonation | None = None,
            maxsize: int = 10, user_agent: str = "tidings") -> Client:
    """A Client for what kubectl would use with these flags. Raises ConfigError."""
    from .client import Client
    from .config import load

    return Client(load(kubeconfig, context, namespace=namespace, impersonate=impersonate),
                  maxsize=maxsize, user_agent=user_agent)


__all__ = [
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "METADATA_ONLY",
    "STRATEGIC_MERGE_PATCH",
    "BoundPod",
    "Change",
    "Client",
    "ClusterConfig",
    "ConfigError",
    "CredentialError",
    "Impersonation",
    "KubeError",
    "ListWatch",
    "Listing",
    "Page",
    "Rewatch",
    "StatusPredicates",
    "WatchLines",
    "bound_pod",
    "close_stream",
    "connect",
    "in_cluster",
    "in_cluster_possible",
    "is_expired",
    "is_retryable_status",
    "iter_line_batches",
    "iter_lines",
    "load",
    "paginate",
    "parse_retry_after",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY, __all__)
