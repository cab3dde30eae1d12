"""What the real node's tests share: pods and Jobs of the workload image running a program
given inline, and reading what they and the watcher wrote."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.support import eventually, expanded

WORKLOAD_IMAGE = "tidings-workload:dev"
# What the restricted Pod Security level asks of a container.
RESTRICTED = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def container(program: str, *, memory: str = "256Mi",
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """The workload image running ``program`` (Python source) as its one container."""
    return {"name": "main", "image": WORKLOAD_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", program],
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                          "limits": {"memory": memory}},
            "securityContext": RESTRICTED}


def run_pod(admin: Any, namespace: str, name: str, program: str, *,
            labels: dict[str, str] | None = None, service_account: str = "default",
            grace: int = 30, **kwargs: Any) -> dict[str, Any]:
    """A bare pod naming no node (the scheduler places it), never restarted."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": "Never", "serviceAccountName": service_account,
                     "terminationGracePeriodSeconds": grace,
                     "containers": [container(program, **kwargs)]}}
    return dict(client.CoreV1Api(admin).create_namespaced_pod(namespace, body).to_dict())


def run_job(admin: Any, namespace: str, name: str, program: str, *, backoff_limit: int = 0,
            service_account: str = "default", **kwargs: Any) -> dict[str, Any]:
    """A batch/v1 Job of one pod running ``program``: no task label, no env (zero wiring)."""
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": backoff_limit, "template": {"spec": {
                "restartPolicy": "Never", "serviceAccountName": service_account,
                "containers": [container(program, **kwargs)]}}}}
    return dict(client.BatchV1Api(admin).create_namespaced_job(namespace, body).to_dict())


def workload_account(admin: Any, namespace: str, name: str = "trainer") -> str:
    """A ServiceAccount bound to tidings-workload and nothing else, as the README asks."""
    client.CoreV1Api(admin).create_namespaced_service_account(namespace,
                                                              {"metadata": {"name": name}})
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"{name}-tidings"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "tidings-workload"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    return name


def pod(admin: Any, namespace: str, name: str) -> Any:
    return client.CoreV1Api(admin).read_namespaced_pod(name, namespace)


def job_pods(admin: Any, namespace: str, job: str) -> list[Any]:
    return list(client.CoreV1Api(admin).list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/job-name={job}").items)


def wait_phase(admin: Any, namespace: str, name: str, phases: tuple[str, ...],
               timeout: float = 120) -> Any:
    return eventually(lambda: (p := pod(admin, namespace, name)).status.phase in phases and p,
                      timeout, f"pod {name} in {phases}")


def logs(admin: Any, namespace: str, name: str) -> str:
    return str(client.CoreV1Api(admin).read_namespaced_pod_log(name, namespace))


def task_status(admin: Any, namespace: str, name: str) -> dict[str, Any]:
    try:
        obj = client.CustomObjectsApi(admin).get_namespaced_custom_object(
            "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", name)
    except client.exceptions.ApiException as err:
        if err.status == 404:
            return {}
        raise
    return expanded(dict(obj.get("status") or {}))  # its records read into their fields


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions", [])}
