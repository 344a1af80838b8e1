"""A hostile user: mutated FungibleJobs beside valid ones, on the local control plane.

A seeded generator (deterministic) applies the mutation kinds of the issue (a template whose
``resources`` or ``limits`` or labels or annotations is a string, GPU limits of ``1e400``,
1000-CPU and 10Ti-memory pods, affinity that matches nothing, bad names, absurd weights and
targets, ...) to valid jobs, two instances per kind with different parameters. Every mutant must
be rejected at admission (HTTP 4xx from the API server) or get ``Admitted=False`` with a reason
and a message; meanwhile the valid jobs (among them pods whose GPUs are in a second container or
an initContainer) run and stay bound, no node goes over any resource, every round succeeds and
the operator's log holds no traceback.

Outcome counts are printed (``-s``) as ``fuzz: N mutants: R rejected, C conditioned, ...``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    OperatorProcess,
    condition,
    create_job,
    create_nodes,
    create_pool,
    get_job,
    http_get,
    install,
    job_manifest,
    list_jobs,
    list_pods,
    pool_manifest,
    start_operator,
    wait_for,
)
from resource_helpers import overcommitted

from walras.testing import devcluster

pytestmark = pytest.mark.slow

GPU = "nvidia.com/gpu"
SEED = 20261124
Rng = np.random.Generator
Mutation = Callable[[Rng, dict[str, Any]], None]


def _pod(m: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = m["spec"]["template"]["spec"]
    return spec


def _c0(m: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _pod(m)["containers"][0]
    return container


def _limits(m: dict[str, Any]) -> dict[str, Any]:
    limits: dict[str, Any] = _c0(m).setdefault("resources", {}).setdefault("limits", {})
    return limits


def _pick(rng: Rng, options: list[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _affinity(expressions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def _set(path: str, value: Callable[[Rng], Any]) -> Mutation:
    """Set ``spec.<path>`` (dotted) to ``value(rng)``."""

    def mutate(rng: Rng, m: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target = m["spec"]
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = value(rng)

    return mutate


def _template(change: Callable[[Rng, dict[str, Any]], None]) -> Mutation:
    return change


MUTATIONS: dict[str, Mutation] = {
    # Template shapes the API server would reject in a Pod.
    "limits-string": lambda r, m: _c0(m).update(resources={"limits": _pick(r, ["4", "gpu:1"])}),
    "resources-string": lambda r, m: _c0(m).update(resources=_pick(r, ["4", "big"])),
    "resources-list": lambda r, m: _c0(m).update(resources=[{"limits": {GPU: 1}}]),
    "labels-string": lambda r, m: m["spec"]["template"].update(metadata={"labels": "a=b"}),
    "annotations-string": lambda r, m: m["spec"]["template"].update(
        metadata={"annotations": _pick(r, ["x", "y=z"])}
    ),
    "label-value-64": lambda r, m: m["spec"]["template"].update(
        metadata={"labels": {"team": "x" * int(r.integers(64, 90))}}
    ),
    "label-key-bad": lambda r, m: m["spec"]["template"].update(
        metadata={"labels": {_pick(r, ["a b", "-x", "x/y/z"]): "v"}}
    ),
    "gpu-1e400": lambda r, m: _limits(m).update({GPU: _pick(r, ["1e400", "9e999"])}),
    "gpu-zero": lambda r, m: _limits(m).update({GPU: "0"}),
    "gpu-fraction": lambda r, m: _limits(m).update({GPU: _pick(r, ["1.5", "500m"])}),
    "gpu-huge": lambda r, m: _limits(m).update({GPU: str(int(r.integers(2000, 10**6)))}),
    "gpu-negative": lambda r, m: _limits(m).update({GPU: "-1"}),
    "cpu-garbage": lambda r, m: _limits(m).update(cpu=_pick(r, ["abc", "1.2.3", "1Zi"])),
    "cpu-1e400": lambda r, m: _limits(m).update(cpu="1e400"),
    "cpu-1000": lambda r, m: _c0(m).update(
        resources={"limits": {GPU: "1"}, "requests": {"cpu": str(int(r.integers(1000, 5000)))}}
    ),
    "memory-10ti": lambda r, m: _c0(m).update(
        resources={"limits": {GPU: "1"}, "requests": {"memory": _pick(r, ["10Ti", "1Pi"])}}
    ),
    "request-over-limit": lambda r, m: _c0(m).update(
        resources={"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}
    ),
    "extended-without-limit": lambda r, m: _c0(m).update(
        resources={"requests": {"example.com/fpga": "1"}}
    ),
    "init-gpu-1e400": lambda r, m: _pod(m).update(
        initContainers=[{"name": "init", "image": "x", "resources": {"limits": {GPU: "1e400"}}}]
    ),
    "init-not-list": lambda r, m: _pod(m).update(initContainers={"name": "i"}),
    "container-name-bad": lambda r, m: _c0(m).update(name=_pick(r, ["Train_1", "a.b", "-x"])),
    "container-name-duplicate": lambda r, m: _pod(m).update(
        containers=[_c0(m), copy.deepcopy(_c0(m))]
    ),
    "container-no-image": lambda r, m: _c0(m).pop("image"),
    "containers-empty": lambda r, m: _pod(m).update(containers=[]),
    "containers-string": lambda r, m: _pod(m).update(containers="train"),
    "env-no-name": lambda r, m: _c0(m).update(env=[{"value": "1"}]),
    "port-out-of-range": lambda r, m: _c0(m).update(
        ports=[{"containerPort": int(r.integers(65536, 10**6))}]
    ),
    "command-not-strings": lambda r, m: _c0(m).update(command=[1, 2]),
    "restart-policy-bad": lambda r, m: _pod(m).update(restartPolicy="Sometimes"),
    "volume-name-bad": lambda r, m: _pod(m).update(volumes=[{"name": "Data_1", "emptyDir": {}}]),
    "service-account-bad": lambda r, m: _pod(m).update(serviceAccountName="Bad_Account"),
    "selector-number": lambda r, m: _pod(m).update(nodeSelector={"zone": 3}),
    "selector-matches-nothing": lambda r, m: _pod(m).update(
        nodeSelector={"walras.test/zone": _pick(r, ["mars", "venus"])}
    ),
    "affinity-matches-nothing": lambda r, m: _pod(m).update(
        affinity=_affinity([{"key": "kubernetes.io/hostname", "operator": "In", "values": ["x"]}])
    ),
    "affinity-gt-not-integer": lambda r, m: _pod(m).update(
        affinity=_affinity([{"key": "gpus", "operator": "Gt", "values": ["many"]}])
    ),
    "affinity-in-no-values": lambda r, m: _pod(m).update(
        affinity=_affinity([{"key": "zone", "operator": "In"}])
    ),
    "affinity-string": lambda r, m: _pod(m).update(affinity="anywhere"),
    "toleration-operator-bad": lambda r, m: _pod(m).update(
        tolerations=[{"key": "a", "operator": "Like"}]
    ),
    "toleration-exists-value": lambda r, m: _pod(m).update(
        tolerations=[{"key": "a", "operator": "Exists", "value": "b"}]
    ),
    "name-too-long": lambda r, m: m["metadata"].update(name="x" + "y" * int(r.integers(63, 120))),
    "weight-huge": _set("utility.weight", lambda r: _pick(r, [1e308, 1e12])),
    "weight-zero": _set("utility.weight", lambda r: 0),
    "target-huge": _set(
        "utility", lambda r: {"kind": "targetPriority", "target": _pick(r, [1e308, 1e13])}
    ),
    "target-missing": _set("utility", lambda r: {"kind": "targetPriority"}),
    "alpha-one": _set("utility", lambda r: {"kind": "alphaFair", "alpha": 1}),
    "alpha-huge": _set("utility", lambda r: {"kind": "alphaFair", "alpha": 1e6}),
    "utility-kind-bad": _set("utility", lambda r: {"kind": _pick(r, ["cubic", "max"])}),
    "throughput-negative": _set("throughput", lambda r: {"v100": -float(r.integers(1, 9))}),
    "throughput-zero": _set("throughput", lambda r: {"v100": 0.0, "k80": 0.0}),
    "throughput-huge": _set("throughput", lambda r: {"v100": 1e300}),
    "throughput-unknown-type": _set("throughput", lambda r: {_pick(r, ["a100", "h100"]): 1.0}),
    "throughput-string": _set("throughput", lambda r: {"v100": "fast"}),
    "replicas-zero": _set("replicas", lambda r: _pick(r, [0, -3])),
    "replicas-huge": _set("replicas", lambda r: int(r.integers(5000, 10**6))),
    "gang-too-large": _set("replicas", lambda r: int(r.integers(100, 4000))),
    "total-work-huge": _set("totalWork", lambda r: 1e300),
    "total-work-negative": _set("totalWork", lambda r: -1.0),
    "backoff-limit-negative": _set("backoffLimit", lambda r: -int(r.integers(1, 9))),
    "template-missing": lambda r, m: m["spec"].pop("template"),
}


def mutants() -> list[tuple[str, dict[str, Any]]]:
    """Two mutants per kind (different parameters and base job), deterministic."""
    rng = np.random.default_rng(SEED)
    bases = [
        job_manifest("base", {"v100": 2.0, "k80": 1.0}, replicas=1, gpus=1),
        job_manifest("base", {"v100": 1.0}, replicas=2, gpus=1, cpu="1"),
    ]
    out = []
    for kind, mutate in MUTATIONS.items():
        for copy_no in range(2):
            manifest = copy.deepcopy(bases[copy_no])
            manifest["metadata"]["name"] = f"m-{kind.lower()}-{copy_no}"
            mutate(rng, manifest)
            out.append((manifest["metadata"]["name"], manifest))
    return out


def _multi_container() -> dict[str, Any]:
    m = job_manifest("valid-two-containers", {"v100": 2.0, "k80": 1.0}, replicas=2, gpus=1)
    _pod(m)["containers"].append(
        {"name": "sidecar", "image": "x", "resources": {"limits": {GPU: "1"}}}
    )
    return m


def _init_container() -> dict[str, Any]:
    m = job_manifest("valid-init", {"v100": 2.0}, replicas=1, gpus=1)
    _pod(m)["initContainers"] = [
        {"name": "warm", "image": "x", "resources": {"limits": {GPU: "4"}}}
    ]
    return m


VALID = [
    job_manifest("valid-a", {"v100": 2.0, "k80": 1.0}, replicas=2, gpus=1, cpu="2"),
    job_manifest("valid-k80", {"k80": 1.0}, replicas=2, gpus=1),
    _multi_container(),  # 2 GPUs per pod
    _init_container(),  # 4 GPUs per pod
]
# GPUs per pod of each valid job, as Kubernetes counts them.
VALID_GPUS = {"valid-a": 1, "valid-k80": 1, "valid-two-containers": 2, "valid-init": 4}


@dataclass
class Outcome:
    namespace: str
    operator: OperatorProcess
    rejected: dict[str, str]  # name -> HTTP status and the API server's message
    accepted: list[str]


@pytest.fixture(scope="module")
def fuzz(
    kube: Any, control_plane: devcluster.ControlPlane, tmp_path_factory: Any
) -> Iterator[Outcome]:
    install(kube)
    create_nodes(kube, "v100", "v100", 2, 8)
    create_nodes(kube, "k80", "k80", 2, 4)
    create_pool(kube, pool_manifest("v100", "v100"))
    create_pool(kube, pool_manifest("k80", "k80"))
    namespace = devcluster.unique_name("t-fuzz")
    devcluster.create_namespace(kube, namespace)
    op = start_operator(control_plane, tmp_path_factory.mktemp("operator"), round_seconds=2.0)
    try:
        for manifest in VALID:
            create_job(kube, namespace, manifest)
        rejected: dict[str, str] = {}
        accepted: list[str] = []
        for name, manifest in mutants():
            try:
                create_job(kube, namespace, manifest)
            except ApiException as exc:
                assert 400 <= exc.status < 500, (name, exc.status, exc.body)
                message = json.loads(exc.body or "{}").get("message", "")
                rejected[name] = f"HTTP {exc.status}: {message}"
            else:
                accepted.append(name)
        yield Outcome(namespace, op, rejected, accepted)
    finally:
        op.terminate()
        devcluster.reset(kube)


def test_every_mutant_is_rejected_or_conditioned(kube: Any, fuzz: Outcome) -> None:
    total = len(fuzz.rejected) + len(fuzz.accepted)
    assert total >= 70

    def conditioned() -> dict[str, str]:
        jobs = {j["metadata"]["name"]: j for j in list_jobs(kube, fuzz.namespace)}
        reasons: dict[str, str] = {}
        silent = []
        for name in fuzz.accepted:
            admitted = condition(jobs[name], "Admitted")
            if admitted is None or admitted["status"] != "False" or not admitted.get("message"):
                silent.append((name, admitted))
            else:
                reasons[name] = str(admitted.get("reason"))
        assert not silent, silent
        return reasons

    reasons = wait_for(conditioned, 90, "a condition on every accepted mutant")
    by_reason: dict[str, int] = {}
    for reason in reasons.values():
        by_reason[reason] = by_reason.get(reason, 0) + 1
    print(
        f"\nfuzz: {total} mutants: {len(fuzz.rejected)} rejected at admission, "
        f"{len(reasons)} conditioned ({dict(sorted(by_reason.items()))}), 0 silent, 0 harmful"
    )
    for name, reason in sorted(reasons.items()):
        print(f"  conditioned {name}: {reason}")
    for name, code in sorted(fuzz.rejected.items()):
        print(f"  rejected {name}: {code[:300]}")
        # Each mutant is rejected for what it mutates: a spec field (the long name: the name).
        assert ("metadata.name" in code) == name.startswith("xy"), (name, code)
    for name in fuzz.accepted:
        assert list_pods(kube, fuzz.namespace, name) == [], f"{name} has pods"


def test_valid_jobs_keep_running(kube: Any, fuzz: Outcome) -> None:
    def running() -> bool:
        for manifest in VALID:
            name = manifest["metadata"]["name"]
            job = get_job(kube, fuzz.namespace, name)
            bound = condition(job, "Bound")
            assert bound is not None and bound["status"] == "True", (name, job.get("status"))
            pods = [
                p
                for p in list_pods(kube, fuzz.namespace, name)
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
            ]
            assert len(pods) == manifest["spec"]["replicas"], name
        return True

    wait_for(running, 90, "the valid jobs to be bound")
    start = fuzz.operator.rounds()
    while fuzz.operator.rounds() < start + 3:
        assert overcommitted(kube) == []
        running()
        wait_for(lambda: True, 1, "a pause", interval=0.3)


def test_pods_carry_their_gpus_once(kube: Any, fuzz: Outcome) -> None:
    """The realiser adds the GPU limit only when no container asks: totals stay Kubernetes'."""
    from walras.core import model

    wait_for(lambda: all(list_pods(kube, fuzz.namespace, n) for n in VALID_GPUS), 90, "valid pods")
    for name, gpus in VALID_GPUS.items():
        for pod in list_pods(kube, fuzz.namespace, name):
            assert model.pod_requests(pod["spec"]).get(GPU) == gpus, (name, pod["spec"])


def test_rounds_never_fail_and_log_is_clean(fuzz: Outcome) -> None:
    wait_for(lambda: fuzz.operator.rounds() >= 5, 90, "five rounds")
    metrics = fuzz.operator.metrics()
    assert metrics.get("walras_failed_rounds_in_a_row") == 0.0
    assert http_get(fuzz.operator.port, "/readyz")[0] == 200
    log = fuzz.operator.log_text()
    assert "Traceback" not in log
    assert "round" in log and "failed; retrying" not in log
    assert fuzz.operator.alive()


def _server_accepts_pod(kube: Any, namespace: str, template: Any) -> tuple[bool, str]:
    """A server-side dry run of a Pod made from ``template`` (nothing is stored)."""
    meta = template.get("metadata") if isinstance(template, dict) else None
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**(meta if isinstance(meta, dict) else {}), "name": "probe"},
        "spec": template.get("spec") if isinstance(template, dict) else None,
    }
    try:
        devcluster.request(
            kube, "POST", f"/api/v1/namespaces/{namespace}/pods", body=body, query={"dryRun": "All"}
        )
    except ApiException as exc:
        return False, str(json.loads(exc.body or "{}").get("message", exc.body))[:200]
    return True, ""


def test_template_checks_agree_with_the_api_server(kube: Any, fuzz: Outcome) -> None:
    """Oracle: the API server itself. For every template that reached the operator (mutants the
    schema accepted, and the valid jobs), ``walras.core.podtemplate.check`` rejects it exactly
    when a dry-run create of a Pod from it fails."""
    from walras.core import podtemplate

    stored = {j["metadata"]["name"]: j for j in list_jobs(kube, fuzz.namespace)}
    disagree = []
    for name in [*fuzz.accepted, *(m["metadata"]["name"] for m in VALID)]:
        template = stored[name]["spec"].get("template")
        server_ok, why = _server_accepts_pod(kube, fuzz.namespace, template)
        problem = podtemplate.check(template)
        if server_ok != (problem is None):
            disagree.append((name, server_ok, why, problem))
    assert disagree == [], "\n".join(map(str, disagree))
