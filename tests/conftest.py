"""Shared pytest fixtures: the real local Kubernetes control plane (see walras.testing.devcluster).

The control plane starts lazily: only when a test asks for ``control_plane``, ``kube`` or
``namespace``, once per session, and stops when the session ends. Unit-test runs never start it.

Missing binaries (``hack/control-plane.sh build`` not run) skip those tests, unless
``WALRAS_REQUIRE_APISERVER=1`` (CI sets it): then they fail, so CI never passes by skipping.

Every test that uses these fixtures, and every test under ``tests/integration``, is marked
``integration`` automatically (``-m "not integration"`` deselects them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from walras.testing import devcluster, realnodes

_CLUSTER_FIXTURES = {"control_plane", "kube", "namespace", "real_cluster"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    integration_dir = Path(__file__).parent / "integration"
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & _CLUSTER_FIXTURES or integration_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[devcluster.ControlPlane]:
    """A running etcd + kube-apiserver + kwok for the whole session."""
    if not devcluster.binaries_available():
        message = (
            "kube-apiserver/etcd/kwok are not built: run `make tools` "
            "(hack/control-plane.sh build, 15-25 min cold)"
        )
        if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
            pytest.fail(message + " [WALRAS_REQUIRE_APISERVER=1]", pytrace=False)
        pytest.skip(message)
    cp = devcluster.start()
    try:
        yield cp
    finally:
        devcluster.stop(cp)


@pytest.fixture(scope="session")
def kube(control_plane: devcluster.ControlPlane) -> Iterator[Any]:
    """Admin ``kubernetes.client.ApiClient`` (group system:masters)."""
    api_client = devcluster.new_client(control_plane.admin_kubeconfig)
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def namespace(kube: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its ``default`` ServiceAccount) for one test, deleted after it
    together with everything in it."""
    name = devcluster.unique_name(f"t-{request.node.name}")
    devcluster.create_namespace(kube, name)
    try:
        yield name
    finally:
        devcluster.delete_namespace(kube, name)


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[realnodes.RealCluster]:
    """A second control plane with two real nodes (kubelet + containerd each, 4 fake
    ``nvidia.com/gpu`` each, the workload image imported), started only when a test asks for it.

    Skipped with the missing capability named (not root, no containerd, kubelet not built, ...)
    unless ``WALRAS_REQUIRE_REAL_NODES=1`` or ``WALRAS_REQUIRE_APISERVER=1``: then it fails.
    """
    if not devcluster.binaries_available():
        missing: str | None = "kube-apiserver/etcd/kwok are not built: run `make tools`"
    else:
        missing = realnodes.missing_capability()
    if missing is not None:
        required = [
            name
            for name in ("WALRAS_REQUIRE_REAL_NODES", "WALRAS_REQUIRE_APISERVER")
            if os.environ.get(name) == "1"
        ]
        if required:
            pytest.fail(f"{missing} [{'=1, '.join(required)}=1]", pytrace=False)
        pytest.skip(missing)
    cluster = realnodes.start_real_cluster(2, gpus_per_real_node=4, gpu_type="fake-a100")
    try:
        yield cluster
    finally:
        realnodes.stop_real_cluster(cluster)
