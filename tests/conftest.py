"""Shared fixtures: one real control plane per test session, clients per identity, and a
fresh namespace per test. Unit tests never touch these, so they run without the binaries."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tools.devcluster import ControlPlane

# No per-example deadline: the suite runs on loaded 2-core machines, where a 200 ms deadline
# fails at random; speed is measured in bench/, never asserted by a test.
settings.register_profile("tidings", deadline=None)
settings.load_profile("tidings")

# A shell starts a background job (`make test &`, a runner's step) with SIGINT ignored, and a
# child inherits an ignored signal: the commands the tests stop with Ctrl-C would not get it
# as a terminal gives it (`tidings ui`'s server then stops on it and exits 0, not 130; a
# followed command never stops). Every child of the suite starts with SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(state_dir=tmp_path_factory.mktemp("control-plane"))
    with cp:
        os.environ["TIDINGS_TEST_KUBECONFIG"] = str(cp.kubeconfig("admin"))
        yield cp


@pytest.fixture(scope="session")
def controller_manager(control_plane: ControlPlane) -> ControlPlane:
    """kube-controller-manager (the Job controller, the garbage collector and ClusterRole
    aggregation: DEFAULT_CONTROLLERS) on the shared control plane: started by the first test
    that needs it, for the rest of the session. A Job created after that gets its pods from
    the Job controller: a test whose Job is not about its pods makes it inert (managedBy
    another controller, as test_platforms.py's hand-made JobSet children are)."""
    control_plane.start_controller_manager()
    return control_plane


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Callable[[str], object]:
    """api_client(user) -> kubernetes.client.ApiClient for admin, alice or bob."""
    from kubernetes import config

    cache: dict[str, object] = {}

    def make(user: str = "admin") -> object:
        if user not in cache:
            cache[user] = config.new_client_from_config(config_file=str(
                control_plane.kubeconfig(user)))
        return cache[user]

    return make


@pytest.fixture(scope="session")
def admin(api_client: Callable[[str], object]) -> object:
    return api_client("admin")


@pytest.fixture
def namespace(control_plane: ControlPlane, admin: object) -> Iterator[str]:
    """A fresh namespace with its `default` ServiceAccount."""
    from kubernetes import client

    name = new_namespace(admin)
    yield name
    client.CoreV1Api(admin).delete_namespace(name)


def new_namespace(admin: object) -> str:
    """A namespace with its `default` ServiceAccount (made here unless the ServiceAccount
    controller, which a real node's tests start, made it first)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(admin)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    except ApiException as err:
        if err.status != 409:
            raise
    return name


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path
