"""``hack/control-plane.sh restart`` (``devcluster.restart_component``): one component of a real
control plane goes down and comes back, as the chaos tests need.

A control plane of its own (restarting the session's one would disturb every other test).
Oracles: the API server's answers: refused while it is down, and every object written before the
outage still there after it (etcd keeps its data directory); the controller manager's garbage
collector works again after its restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import wait_for

from walras.testing import devcluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def private_cp() -> Iterator[devcluster.ControlPlane]:
    if not devcluster.binaries_available():
        pytest.skip("kube-apiserver/etcd/kwok are not built: run `make tools`")
    cp = devcluster.start()
    try:
        yield cp
    finally:
        devcluster.stop(cp)


def reachable(api: Any) -> bool:
    try:
        k8s.CoreV1Api(api).list_namespace(_request_timeout=2)
        return True
    except Exception:
        return False


def config_map(core: Any, name: str, data: dict[str, str], owner: Any = None) -> Any:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": owner.metadata.name,
                "uid": owner.metadata.uid,
            }
        ]
    return core.create_namespaced_config_map("default", {"metadata": meta, "data": data})


@pytest.mark.parametrize("component", ["etcd", "kube-apiserver"])
def test_a_restarted_store_or_api_server_keeps_every_object(
    private_cp: devcluster.ControlPlane, component: str
) -> None:
    api = private_cp.admin_client()
    try:
        core = k8s.CoreV1Api(api)
        config_map(core, f"before-{component}", {"k": "v"})
        devcluster.stop_component(private_cp, component)
        if component == "kube-apiserver":  # (with etcd down it may still serve its cache)
            assert not reachable(api)
        devcluster.start_component(private_cp, component)
        wait_for(lambda: reachable(api), 60, "the API server to answer again")
        got = core.read_namespaced_config_map(f"before-{component}", "default")
        assert got.data == {"k": "v"}
        devcluster.restart_component(private_cp, component, down_s=1.0, kill=True)
        wait_for(lambda: reachable(api), 60, "the API server to answer after a SIGKILL")
        assert core.read_namespaced_config_map(f"before-{component}", "default").data == {"k": "v"}
    finally:
        api.close()


def test_a_restarted_controller_manager_collects_garbage_again(
    private_cp: devcluster.ControlPlane,
) -> None:
    api = private_cp.admin_client()
    try:
        core = k8s.CoreV1Api(api)
        devcluster.restart_component(private_cp, "kube-controller-manager", down_s=1.0)
        owner = config_map(core, "owner", {})
        config_map(core, "dependent", {}, owner=owner)
        core.delete_namespaced_config_map("owner", "default")

        def collected() -> bool:
            names = {c.metadata.name for c in core.list_namespaced_config_map("default").items}
            return "dependent" not in names

        wait_for(collected, 60, "the garbage collector to delete the dependent")
    finally:
        api.close()


def test_an_unknown_component_is_refused(private_cp: devcluster.ControlPlane) -> None:
    with pytest.raises(ValueError, match="kwok"):
        devcluster.restart_component(private_cp, "kwok")
