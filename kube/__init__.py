"""The one Kubernetes client layer of tidings (``tidings.kube``), shared by the emitter, the
watcher and the CLI: kubectl's kubeconfig semantics and in-cluster config (``config``),
renewable credentials (``auth``), one urllib3 client with pagination and watch-line reading
(``client``), one list+watch loop (``watch``), one error type and one retry rule
(``errors``).

Light on purpose (urllib3, orjson, PyYAML): it runs inside workload images.
"""

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


def connect(kubeconfig: str | None = None, context: str | None = None, *,
            namespace: str | None = None, impersonate: Impersonation | None = None,
            maxsize: int = 10, user_agent: str = "tidings") -> Client:
    """A Client for what kubectl would use with these flags. Raises ConfigError."""
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
