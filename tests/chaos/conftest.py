"""The chaos suite: faults injected into a real local control plane while ``walras operator`` runs.

Each test runs on a control plane of its own (``chaos_plane``, one per module): restarting the
API server or etcd of the session's shared control plane would disturb every other test. Every
test here is marked ``chaos`` and ``integration`` (``-m "not chaos"`` deselects them), and runs in
the default ``make test``. Missing binaries skip, unless ``WALRAS_REQUIRE_APISERVER=1`` (CI).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from walras.testing import devcluster

HERE = Path(__file__).parent
# operator_helpers (start_operator, object builders) are shared with the integration tests.
sys.path.insert(0, str(HERE.parent / "integration"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def chaos_plane() -> Iterator[devcluster.ControlPlane]:
    """A control plane of this module's own, with the CRDs and the Lease namespace."""
    if not devcluster.binaries_available():
        message = "kube-apiserver/etcd/kwok are not built: run `make tools`"
        if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
            pytest.fail(message + " [WALRAS_REQUIRE_APISERVER=1]", pytrace=False)
        pytest.skip(message)
    cp = devcluster.start()
    try:
        api = cp.admin_client()
        try:
            devcluster.install_crds(api, sorted((HERE.parents[1] / "crds").glob("*.yaml")))
            devcluster.create_namespace(api, "walras-system")
        finally:
            api.close()
        yield cp
    finally:
        devcluster.stop(cp)


@pytest.fixture
def chaos_api(chaos_plane: devcluster.ControlPlane) -> Iterator[Any]:
    api = chaos_plane.admin_client()
    try:
        yield api
    finally:
        api.close()
