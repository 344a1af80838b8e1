"""Fixtures of the tests that run the reference workload on real nodes under the operator
(``test_real_workloads.py``, ``test_real_adopted_jobs.py``): ``api`` (an admin client of the
``real_cluster`` control plane, with the CRDs and the ``real-a100`` pool), ``ns`` (a fresh
namespace with the reference workload's ServiceAccount and Role) and ``observer`` (a
:class:`walras.testing.runtime_observer.Observer` of that namespace on the real nodes). A module
that defines a fixture of the same name uses its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import CRDS, create_pool, pool_manifest

from walras.testing import devcluster, realnodes
from walras.testing.reference_jobs import setup_namespace
from walras.testing.runtime_observer import Observer


@pytest.fixture(scope="module")
def api(real_cluster: realnodes.RealCluster) -> Iterator[Any]:
    client = real_cluster.control_plane.admin_client()
    devcluster.install_crds(client, CRDS)
    try:
        create_pool(client, pool_manifest("real-a100", "fake-a100"))
    except ApiException as exc:  # the pool of another real-node module, same session
        if exc.status != 409:
            raise
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def ns(api: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    name = devcluster.unique_name(f"rw-{request.node.name}")
    devcluster.create_namespace(api, name)
    setup_namespace(api, name)
    try:
        yield name
    finally:
        devcluster.delete_namespace(api, name, timeout=120)


@pytest.fixture
def observer(real_cluster: realnodes.RealCluster, ns: str) -> Iterator[Observer]:
    obs = Observer(real_cluster.control_plane, real_cluster.nodes, ns)
    obs.start()
    try:
        yield obs
    finally:
        obs.stop()
