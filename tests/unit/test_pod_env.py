"""Pods Walras creates tell their workload which pod they are (walras.core.pod_env).

Oracle: the downward API's contract — the kubelet sets each ``valueFrom.fieldRef`` variable to
that field of the pod — applied by hand to the built manifest, then read back by the workload
helper (``walras.workload.pod_identity``) exactly as it runs inside the pod.
"""

from __future__ import annotations

from typing import Any

from tests.unit.snapshot_helpers import cluster, job

from walras import workload
from walras.core import cycle, pod_env, policies


def created(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    plan = cycle.plan(
        cycle.CycleState(),
        policies.create("price-discovery", {"backend": "numpy"}),
        cluster(jobs).freeze(now=0.0),
        now=0.0,
        round_no=1,
    )
    return [c.manifest for c in plan.realisation.creates]


def resolved_env(manifest: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """What the kubelet puts in the container's environment (literal values and fieldRefs of
    metadata.name/namespace; the last entry of a name wins, as in the kubelet)."""
    fields = {
        "metadata.name": manifest["metadata"]["name"],
        "metadata.namespace": manifest["metadata"]["namespace"],
    }
    out = {}
    for e in container.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        out[e["name"]] = fields[ref["fieldPath"]] if ref else e["value"]
    return out


def test_every_container_finds_its_own_pod() -> None:
    spec = job("train", {"v100": 4.0, "k80": 1.0}, replicas=2)
    spec["spec"]["template"]["spec"]["containers"].append({"name": "sidecar"})
    manifests = created([spec])
    assert len(manifests) == 2  # the gang of two replicas
    for manifest in manifests:
        for container in manifest["spec"]["containers"]:
            env = resolved_env(manifest, container)
            # No hostname fallback: the helper sees the pod's own name and namespace.
            assert workload.pod_identity({**env, "HOSTNAME": "not-the-pod"}) == (
                "ns",
                manifest["metadata"]["name"],
            )


def test_a_template_that_sets_the_names_keeps_its_own_values() -> None:
    # Another job (uid): the realiser caches each job's template by (uid, generation).
    spec = job("own-env", {"v100": 4.0, "k80": 1.0})
    mine = {"name": pod_env.POD_NAME, "value": "chosen-by-user"}
    spec["spec"]["template"]["spec"]["containers"][0]["env"] = [mine]
    (manifest,) = created([spec])
    env = manifest["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == pod_env.POD_NAME] == [mine]
    assert resolved_env(manifest, manifest["spec"]["containers"][0]) == {
        pod_env.POD_NAME: "chosen-by-user",
        pod_env.POD_NAMESPACE: "ns",
    }


def test_the_pods_of_a_gang_share_no_mutable_part() -> None:
    # The realiser serialises each job's template once and gives every pod a fresh copy: an
    # edit to one pod (the API client's, a mutating webhook's) must not reach its sibling.
    a, b = created([job("pair", {"v100": 4.0, "k80": 1.0}, replicas=2)])
    first = a["spec"]["containers"][0]
    first["env"].append({"name": "EDITED", "value": "1"})
    first["resources"]["limits"]["cpu"] = "9"
    a["metadata"]["labels"]["edited"] = "yes"
    other = b["spec"]["containers"][0]
    assert [e["name"] for e in other["env"]] == [pod_env.POD_NAME, pod_env.POD_NAMESPACE]
    assert "cpu" not in other["resources"]["limits"]
    assert "edited" not in b["metadata"]["labels"]
    assert b["spec"]["schedulerName"] == a["spec"]["schedulerName"] == "walras"
