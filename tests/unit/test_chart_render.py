"""The Helm chart (charts/walras), rendered offline.

`helm lint` and `helm template` run over every charts/walras/ci/*.yaml; the built-in kinds of each
rendering are validated against the Kubernetes OpenAPI schemas with kubernetes-validate (strict:
unknown fields fail). On top of the schema, the tests check the properties the chart promises:
least-privilege RBAC (an exact table of what each ServiceAccount may do, no wildcards, no
secrets), the hardened security context, the flags handed to `walras operator` (parsed by the real
CLI), probes and ports that agree with those flags, and chart CRDs identical to crds/.

Needs the helm binary from hack/install-tools.sh ($WALRAS_CACHE/bin/helm); without it the tests
skip, or fail when WALRAS_REQUIRE_APISERVER=1 (CI).
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from walras.core import policies

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "walras"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
NAMESPACE = "walras-system"
# The apiserver version the project runs; kubernetes-validate ships its schemas.
KUBE_VERSION = "1.36.0"

Manifest = dict[str, Any]


def _helm_path() -> str | None:
    try:
        from walras.testing import devcluster

        return str(devcluster.tool("helm"))
    except Exception:  # devcluster not there yet, or helm not installed: look in the cache
        cache = Path(os.environ.get("WALRAS_CACHE", Path.home() / ".cache" / "walras"))
        path = cache / "bin" / "helm"
        return str(path) if path.exists() else shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    path = _helm_path()
    if path is None:
        if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
            pytest.fail("helm not found; run `make tools`")
        pytest.skip("helm not found; run `make tools`")
    return path


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def render(helm: str, *args: str) -> list[Manifest]:
    """`helm template` the chart into the test namespace; one dict per non-empty document."""
    proc = _run([helm, "template", "walras", str(CHART), "--namespace", NAMESPACE, *args])
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def render_error(helm: str, *args: str) -> str:
    proc = _run([helm, "template", "walras", str(CHART), "--namespace", NAMESPACE, *args])
    assert proc.returncode != 0, f"helm template {args} should have failed"
    return proc.stderr


def of_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Manifest], kind: str, component: str | None = None) -> Manifest:
    found = [
        d
        for d in of_kind(docs, kind)
        if component is None
        or d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"expected one {kind} ({component}), found {len(found)}"
    return found[0]


def parse_args(args: list[str]) -> dict[str, str]:
    """`--key=value` / `--flag` list -> {key: value or "true"}."""
    out: dict[str, str] = {}
    for arg in args:
        assert arg.startswith("--"), arg
        key, _, value = arg[2:].partition("=")
        out[key] = value if _ else "true"
    return out


@pytest.fixture(scope="module", params=CI_VALUES, ids=[p.stem for p in CI_VALUES])
def rendering(request: pytest.FixtureRequest, helm: str) -> tuple[Path, list[Manifest]]:
    values: Path = request.param
    return values, render(helm, "--values", str(values))


# ---- lint and schema ----------------------------------------------------------------------------


def test_ci_values_exist() -> None:
    assert len(CI_VALUES) >= 4, "charts/walras/ci/ should exercise several configurations"


@pytest.mark.parametrize(
    "values", [None, *CI_VALUES], ids=["chart-defaults", *(p.stem for p in CI_VALUES)]
)
def test_helm_lint_strict(helm: str, values: Path | None) -> None:
    args = [helm, "lint", "--strict", str(CHART)] + (["--values", str(values)] if values else [])
    proc = _run(args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_builtin_kinds_validate_against_kubernetes_schema(
    rendering: tuple[Path, list[Manifest]],
) -> None:
    _, docs = rendering
    validated = []
    for doc in docs:
        group = doc["apiVersion"].rpartition("/")[0]
        if group.endswith("coreos.com"):  # ServiceMonitor: a CRD kubernetes-validate does not know
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        validated.append(doc["kind"])
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= set(validated)


def test_every_object_is_labelled_and_namespaced(rendering: tuple[Path, list[Manifest]]) -> None:
    _, docs = rendering
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
    for doc in docs:
        meta = doc["metadata"]
        assert meta["labels"]["app.kubernetes.io/part-of"] == "walras", meta["name"]
        if doc["kind"] in cluster_scoped:
            assert "namespace" not in meta
        else:
            assert meta["namespace"] == NAMESPACE, (doc["kind"], meta["name"])


# ---- RBAC ---------------------------------------------------------------------------------------

# What each ServiceAccount may do, exactly: (apiGroup, resource) -> verbs. A rule the code needs
# that is missing here fails the integration test (tests/integration/test_chart_install.py); a rule
# granted beyond this table fails here.
CONTROLLER_GRANTS: dict[tuple[str, str], set[str]] = {
    # patch: the advance notice annotation (walras.dev/stop-at) on the pods of a gang that stops.
    ("", "pods"): {"get", "list", "watch", "create", "delete", "patch"},
    ("", "pods/binding"): {"create"},
    ("", "nodes"): {"get", "list", "watch"},
    ("", "events"): {"create"},
    # Mirrors of adopted workloads are created and their specs follow their workloads (patch);
    # never deleted. The adopted Jobs, JobSets and TrainJobs suspended/started.
    ("walras.dev", "fungiblejobs"): {"get", "list", "watch", "create", "patch"},
    ("walras.dev", "fungiblejobs/status"): {"patch"},
    ("batch", "jobs"): {"get", "list", "watch", "patch"},
    ("jobset.x-k8s.io", "jobsets"): {"get", "list", "watch", "patch"},
    ("trainer.kubeflow.org", "trainjobs"): {"get", "list", "watch", "patch"},
    ("walras.dev", "resourcepools"): {"get", "list", "watch"},
    ("walras.dev", "resourcepools/status"): {"patch"},
    ("walras.dev", "nodeallocations"): {"get", "list", "watch"},
    # Tenants are admin-owned: the controller reads them and patches only their status.
    ("walras.dev", "tenants"): {"get", "list", "watch"},
    ("walras.dev", "tenants/status"): {"patch"},
    # PriorityClasses are the admin's: read-only (walras.core.priorities).
    ("scheduling.k8s.io", "priorityclasses"): {"get", "list", "watch"},
    # Statements of work: listed each round, status patched.
    ("walras.dev", "statementsofwork"): {"get", "list"},
    ("walras.dev", "statementsofwork/status"): {"patch"},
}
AGENT_GRANTS: dict[tuple[str, str], set[str]] = {
    # Its own Node, list-then-watch with a metadata.name field selector (kube.agents.Informer):
    # RBAC cannot limit list/watch to one name, so the verbs are cluster-wide but read-only.
    ("", "nodes"): {"get", "list", "watch"},
    ("walras.dev", "fungiblejobs"): {"get", "list", "watch"},
    ("walras.dev", "resourcepools"): {"get", "list", "watch"},
    # Tenant objects (names, weights, namespaces): agents build the central tenant model.
    ("walras.dev", "tenants"): {"get", "list", "watch"},
    ("walras.dev", "nodeallocations"): {"get", "list", "watch", "create"},
    ("walras.dev", "nodeallocations/status"): {"patch"},
}
AGGREGATOR_GRANTS: dict[tuple[str, str], set[str]] = {
    ("", "nodes"): {"get", "list", "watch"},
    ("walras.dev", "nodeallocations"): {"get", "list", "watch", "create", "delete"},
    ("walras.dev", "nodeallocations/status"): {"patch"},
}
# Namespaced Lease access (leader election): create anything, get/update only the named Lease.
LEASE_RULES = [
    ({"coordination.k8s.io"}, {"leases"}, None, {"create"}),
    ({"coordination.k8s.io"}, {"leases"}, {"walras-controller"}, {"get", "update"}),
]


def grants(rules: list[Mapping[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "resourceNames" not in rule, "cluster-wide rules are not limited by name here"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def all_rules(docs: list[Manifest]) -> Iterator[Mapping[str, Any]]:
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "Role"):
            yield from doc.get("rules", [])


def test_rbac_has_no_wildcards_secrets_or_escalation(
    rendering: tuple[Path, list[Manifest]],
) -> None:
    _, docs = rendering
    rules = list(all_rules(docs))
    assert rules
    for rule in rules:
        fields = [*rule.get("apiGroups", []), *rule["resources"], *rule["verbs"]]
        fields += rule.get("resourceNames", [])
        assert not any("*" in f for f in fields), rule
        assert "nonResourceURLs" not in rule, rule
        assert not {"secrets", "serviceaccounts/token"} & set(rule["resources"]), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
    # ConfigMaps: only the schedule history's namespaced Role grants them (not a ClusterRole).
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "Role") and not doc["metadata"]["name"].endswith(
            "-history"
        ):
            assert all("configmaps" not in r["resources"] for r in doc.get("rules", [])), doc
    assert not of_kind(docs, "ClusterRole") or all(
        "aggregationRule" not in d for d in of_kind(docs, "ClusterRole")
    )


def _bound_subject(
    docs: list[Manifest], binding_kind: str, role_name: str
) -> list[tuple[str, str]]:
    return [
        (s["namespace"], s["name"])
        for b in of_kind(docs, binding_kind)
        if b["roleRef"]["name"] == role_name
        for s in b["subjects"]
    ]


def test_controller_clusterrole_is_exactly_what_it_needs(
    rendering: tuple[Path, list[Manifest]],
) -> None:
    _, docs = rendering
    role = one(docs, "ClusterRole", "controller")
    assert grants(role["rules"]) == CONTROLLER_GRANTS
    subjects = _bound_subject(docs, "ClusterRoleBinding", role["metadata"]["name"])
    assert subjects == [(NAMESPACE, "walras-controller")]
    sa = one(docs, "ServiceAccount", "controller")
    assert sa["metadata"]["name"] == "walras-controller"


def test_leader_election_role_is_namespaced_and_named(
    rendering: tuple[Path, list[Manifest]],
) -> None:
    _, docs = rendering
    deployment = one(docs, "Deployment", "controller")
    args = parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    roles = of_kind(docs, "Role")
    if "no-leader-elect" in args:
        assert [r["metadata"]["name"].endswith("-controller-history") for r in roles] == [True]
        return
    assert args["leader-elect"] == "true"
    assert args["lease-namespace"] == NAMESPACE
    (role,) = (r for r in roles if r["metadata"]["name"].endswith("-leader-election"))
    assert role["metadata"]["namespace"] == NAMESPACE
    got = [
        (
            set(r["apiGroups"]),
            set(r["resources"]),
            set(r["resourceNames"]) if "resourceNames" in r else None,
            set(r["verbs"]),
        )
        for r in role["rules"]
    ]
    assert got == LEASE_RULES
    assert {args["lease-name"]} == LEASE_RULES[1][2]
    binding = _bound_subject(docs, "RoleBinding", role["metadata"]["name"])
    assert binding == [(NAMESPACE, "walras-controller")]


# The schedule history (walras.operator.history_store): ConfigMaps in the release namespace only,
# exactly the verbs history_store.VERBS checks at start-up.
HISTORY_RULES = [({""}, {"configmaps"}, {"list", "create", "patch"})]


def test_history_role_is_namespaced_and_matches_the_operator(
    rendering: tuple[Path, list[Manifest]],
) -> None:
    from walras.operator import history_store

    _, docs = rendering
    deployment = one(docs, "Deployment", "controller")
    args = parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert args["history-namespace"] == NAMESPACE
    (role,) = (r for r in of_kind(docs, "Role") if r["metadata"]["name"].endswith("-history"))
    assert role["metadata"]["namespace"] == NAMESPACE
    got = [(set(r["apiGroups"]), set(r["resources"]), set(r["verbs"])) for r in role["rules"]]
    assert got == HISTORY_RULES
    assert HISTORY_RULES[0][2] == set(history_store.VERBS)
    binding = _bound_subject(docs, "RoleBinding", role["metadata"]["name"])
    assert binding == [(NAMESPACE, "walras-controller")]


def _component(doc: Manifest) -> str:
    return str(doc["metadata"]["labels"]["app.kubernetes.io/component"])


def test_agent_and_aggregator_rbac_only_when_enabled(
    rendering: tuple[Path, list[Manifest]],
) -> None:
    _, docs = rendering
    roles = {_component(d): d for d in of_kind(docs, "ClusterRole")}
    accounts = sorted(sa["metadata"]["name"] for sa in of_kind(docs, "ServiceAccount"))
    if not of_kind(docs, "DaemonSet"):
        assert set(roles) == {"controller"}
        assert accounts == ["walras-controller"]
        assert [_component(d) for d in of_kind(docs, "Deployment")] == ["controller"]
        return
    assert accounts == ["walras-agent", "walras-aggregator", "walras-controller"]
    for component, table, account in [
        ("agent", AGENT_GRANTS, "walras-agent"),
        ("aggregator", AGGREGATOR_GRANTS, "walras-aggregator"),
    ]:
        assert grants(roles[component]["rules"]) == table, component
        subjects = _bound_subject(docs, "ClusterRoleBinding", roles[component]["metadata"]["name"])
        assert subjects == [(NAMESPACE, account)]
    assert (
        one(docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == "walras-agent"
    )
    aggregator = one(docs, "Deployment", "aggregator")
    assert aggregator["spec"]["replicas"] == 1
    assert aggregator["spec"]["strategy"]["type"] == "Recreate"
    assert aggregator["spec"]["template"]["spec"]["serviceAccountName"] == "walras-aggregator"


# ---- pods: security, flags, probes, ports -------------------------------------------------------


def pod_specs(docs: list[Manifest]) -> Iterator[tuple[str, Manifest]]:
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            yield doc["kind"], doc["spec"]["template"]["spec"]


def test_pods_are_hardened(rendering: tuple[Path, list[Manifest]]) -> None:
    _, docs = rendering
    specs = list(pod_specs(docs))
    assert specs
    for kind, spec in specs:
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True, kind
        assert pod_sc["runAsUser"] != 0, kind
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault", kind
        assert spec.get("hostNetwork", False) is False and spec.get("hostPID", False) is False
        tmp_volumes = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, kind
            assert sc["allowPrivilegeEscalation"] is False, kind
            assert sc.get("privileged", False) is False, kind
            assert sc["capabilities"]["drop"] == ["ALL"], kind
            assert "add" not in sc["capabilities"], kind
            # The only writable place is /tmp, an emptyDir; HOME and matplotlib point there.
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts["/tmp"] in tmp_volumes
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["HOME"] == "/tmp" and env["MPLCONFIGDIR"].startswith("/tmp")
            assert "memory" in container["resources"]["limits"], kind


# The chart's policy value is the operator's --policy, a name from the policy registry.
POLICY_FLAGS = {name: name for name in policies.names()}


def test_chart_policy_choices_are_the_registry() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["policy"]["enum"] == list(policies.names())


@pytest.mark.parametrize("policy", sorted(POLICY_FLAGS))
def test_values_map_to_operator_flags(helm: str, policy: str) -> None:
    docs = render(
        helm,
        "--set", f"policy={policy}",
        "--set", "agent.enabled=true",
        "--set", "roundSeconds=45",
        "--set", "minRunSeconds=30",
        "--set", "logging.format=json",
        "--set", "staleAfterSeconds=12",
        "--set", "controller.ports.metrics=9100",
        "--set", "controller.ports.health=9101",
        "--set", "controller.leaderElection.leaseName=my-lease",
        "--set", "solver.popShards=4",
        "--set-json", 'policyArgs={"price-discovery": {"eps": 0.0005, "backend": "numpy", '
        '"weighting": "remaining", "weighting_exponent": -1}, "psdsf": {"mode": "rdm"}}',
        "--set", "throughputs.measuredMinSamples=5",
        "--set-json", "throughputs.mismatchFactor=1.5",
        "--set", "throughputs.absurdFactor=20",
        "--set", "throughputs.profilingSeconds=90",
        "--set", "throughputs.profileDeclared=true",
    )  # fmt: skip
    container = one(docs, "Deployment", "controller")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["walras", "operator"]
    # Every policyArgs entry is one --policy-arg (sorted by policy, then argument).
    assert [a for a in container["args"] if a.startswith("--policy-arg=")] == [
        "--policy-arg=price-discovery.backend=numpy",
        "--policy-arg=price-discovery.eps=0.0005",
        "--policy-arg=price-discovery.weighting=remaining",
        "--policy-arg=price-discovery.weighting_exponent=-1",
        "--policy-arg=psdsf.mode=rdm",
    ]
    args = parse_args([a for a in container["args"] if not a.startswith("--policy-arg=")])
    assert args == {
        "policy": POLICY_FLAGS[policy],
        "round-seconds": "45",
        "min-run-seconds": "30",
        "pop-shards": "4",
        "measured-min-samples": "5",
        "mismatch-factor": "1.5",
        "absurd-factor": "20",
        "profiling-seconds": "90",
        "profile-declared": "true",
        "stale-after": "12",
        "log-format": "json",
        "metrics-port": "9100",
        "health-port": "9101",
        "history-namespace": NAMESPACE,
        "leader-elect": "true",
        "lease-namespace": NAMESPACE,
        "lease-name": "my-lease",
        "identity": "$(POD_NAME)",
    }


def _cli_command(name: str) -> Any:
    """The click command behind `walras NAME` (typer builds it from walras.cli.app.app)."""
    import importlib

    import typer

    importlib.import_module("walras.cli")  # imports every command module, which registers itself
    group = typer.main.get_command(importlib.import_module("walras.cli.app").app)
    command = group.get_command(None, name)  # type: ignore[attr-defined]
    if command is None:
        pytest.fail(f"walras {name} is not registered on walras.cli.app.app")
    return command


def test_rendered_args_parse_with_the_real_cli(rendering: tuple[Path, list[Manifest]]) -> None:
    """Every flag the chart passes exists and has a valid value: the CLI parses them (no run)."""
    _, docs = rendering
    containers = [c for _, spec in pod_specs(docs) for c in spec["containers"]]
    assert containers
    for container in containers:
        program, subcommand = container["command"]
        assert program == "walras"
        args = [
            a.replace("$(POD_NAME)", "walras-controller-0").replace("$(NODE_NAME)", "gpu-node-0")
            for a in container["args"]
        ]
        ctx = _cli_command(subcommand).make_context(subcommand, args, resilient_parsing=False)
        assert ctx.params, container["name"]


def test_probes_and_ports_match_the_flags(rendering: tuple[Path, list[Manifest]]) -> None:
    _, docs = rendering
    deployment = one(docs, "Deployment", "controller")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = parse_args(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": int(args["metrics-port"]), "health": int(args["health-port"])}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    for service in of_kind(docs, "Service"):
        assert service["spec"]["selector"] == selector
        assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]
    for pdb in of_kind(docs, "PodDisruptionBudget"):
        assert pdb["spec"]["selector"]["matchLabels"] == selector
    for monitor in of_kind(docs, "ServiceMonitor"):
        assert monitor["spec"]["selector"]["matchLabels"] == selector
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]


def test_agent_daemonset_gets_its_node_from_the_downward_api(helm: str) -> None:
    docs = render(helm, "--set", "agent.enabled=true")
    container = one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["walras", "agent"]
    assert container["args"][0] == "--node-name=$(NODE_NAME)"
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


@pytest.mark.parametrize("port", [9090, 0])
def test_agent_and_aggregator_metrics_port_matches_the_flag(helm: str, port: int) -> None:
    docs = render(helm, "--set", "agent.enabled=true", "--set", f"agent.metricsPort={port}")
    for kind in ("DaemonSet", "Deployment"):
        for doc in of_kind(docs, kind):
            container = doc["spec"]["template"]["spec"]["containers"][0]
            if container["command"] != ["walras", "agent"]:
                continue  # the controller: test_probes_and_ports_match_the_flags
            assert int(parse_args(container["args"])["metrics-port"]) == port
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            assert ports == ({"metrics": port} if port else {})


def test_defaults_are_conservative(helm: str) -> None:
    docs = render(helm)
    assert of_kind(docs, "DaemonSet") == []
    assert of_kind(docs, "ServiceMonitor") == []
    deployment = one(docs, "Deployment", "controller")
    assert deployment["spec"]["replicas"] == 1
    # /readyz is true only on the Lease holder: a RollingUpdate would wait forever for a new pod
    # that cannot become leader while the old one runs.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert one(docs, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": one(docs, "Deployment", "controller")["spec"]["selector"],
    }


def test_pdb_min_available_takes_precedence(helm: str) -> None:
    docs = render(
        helm,
        "--set",
        "controller.replicas=2",
        "--set",
        "controller.podDisruptionBudget.minAvailable=1",
    )
    spec = one(docs, "PodDisruptionBudget")["spec"]
    assert (spec.get("minAvailable"), spec.get("maxUnavailable")) == (1, None)


# psdsf-distributed with the operator reading the agents' tasks as RDM, the agents left at TDM.
DISTRIBUTED_RDM = [
    *("--set", "policy=psdsf-distributed", "--set", "agent.enabled=true"),
    *("--set", "policyArgs.psdsf-distributed.mode=rdm"),
]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--set", "policy=fifo"], "policy", id="unknown policy"),
        pytest.param(["--set", "controler.replicas=2"], "controler", id="typo in a key"),
        pytest.param(["--set", "minRunSeconds=-1"], "minRunSeconds", id="negative minimum run"),
        pytest.param(
            ["--set", "policy=psdsf-distributed"], "agent.enabled", id="distributed, no agents"
        ),
        pytest.param(
            ["--set", "controller.replicas=2", "--set", "controller.leaderElection.enabled=false"],
            "leaderElection",
            id="two writers",
        ),
        pytest.param(
            ["--set-json", 'policyArgs={"price-discovery": {"eps": 2}}'],
            "eps",
            id="eps out of range",
        ),
        pytest.param(
            ["--set", "policyArgs.price-discovery.backend=cupy"], "backend", id="unknown backend"
        ),
        pytest.param(
            ["--set", "policyArgs.psdsf.weighting=none"], "weighting", id="argument of another"
        ),
        pytest.param(["--set", "policyArgs.nope.mode=tdm"], "nope", id="unknown policy's args"),
        pytest.param(
            DISTRIBUTED_RDM,
            "policyArgs.psdsf-distributed.mode (rdm) must equal agent.mode (tdm)",
            id="operator and agents in different modes",
        ),
        pytest.param(
            ["--set", "controller.podDisruptionBudget.maxUnavailable=null"],
            "minAvailable or maxUnavailable",
            id="pdb without a bound",
        ),
    ],
)
def test_invalid_values_are_rejected(helm: str, args: list[str], message: str) -> None:
    assert message in render_error(helm, *args)


# ---- CRDs ---------------------------------------------------------------------------------------


def test_chart_crds_equal_the_source() -> None:
    source = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    copied = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert source, "no CRDs in crds/"
    assert copied == source, "run `make crds-sync`"
    match, mismatch, errors = filecmp.cmpfiles(ROOT / "crds", CHART / "crds", source, shallow=False)
    assert (mismatch, errors) == ([], []), "run `make crds-sync`"
    assert match == source


def test_crds_are_not_templated(helm: str) -> None:
    """CRDs come from crds/: installed once by helm, never templated, never deleted."""
    assert of_kind(render(helm, "--set", "agent.enabled=true"), "CustomResourceDefinition") == []
    proc = _run([helm, "show", "crds", str(CHART)])
    assert proc.returncode == 0, proc.stderr
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(proc.stdout) if d}
    expected = {
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (ROOT / "crds").glob("*.yaml")
    }
    assert names == expected


@pytest.fixture
def scratch_repo(tmp_path: Path) -> Path:
    """A copy of what hack/verify.sh reads, to stage drift without touching the tree."""
    for script in ("sync-crds.sh", "verify.sh", "install-tools.sh"):
        (tmp_path / "hack").mkdir(exist_ok=True)
        shutil.copy(ROOT / "hack" / script, tmp_path / "hack" / script)
    shutil.copytree(ROOT / "crds", tmp_path / "crds")
    shutil.copytree(CHART, tmp_path / "charts" / "walras")
    return tmp_path


def _verify(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "hack" / "verify.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_verify_passes_in_sync_and_fails_with_a_diff_on_drift(
    helm: str, scratch_repo: Path
) -> None:
    clean = _verify(scratch_repo)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    edited = sorted((scratch_repo / "charts" / "walras" / "crds").glob("*.yaml"))[0]
    edited.write_text(edited.read_text() + "# hand edit\n")
    drift = _verify(scratch_repo)
    assert drift.returncode == 1
    assert "+# hand edit" in drift.stdout and "make crds-sync" in drift.stderr

    edited.unlink()  # a CRD the chart lacks is drift too
    missing = _verify(scratch_repo)
    assert missing.returncode == 1 and f"Only in {scratch_repo}" not in missing.stdout
    assert edited.name in missing.stdout

    subprocess.run(["bash", str(scratch_repo / "hack" / "sync-crds.sh")], check=True, timeout=60)
    assert _verify(scratch_repo).returncode == 0


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.stem for p in CI_VALUES])
def test_notes_render(helm: str, values: Path) -> None:
    install = [helm, "install", "walras", str(CHART), "--namespace", NAMESPACE]
    proc = _run([*install, "--dry-run=client", "--values", str(values)])
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.partition("NOTES:")[2]
    assert f"is installed in namespace {NAMESPACE}" in notes
    policy = yaml.safe_load(values.read_text()) or {}
    assert f"--policy={POLICY_FLAGS[policy.get('policy', 'price-discovery')]}" in notes


# ---- the image the chart runs --------------------------------------------------------------------


def _final_stage(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile's last stage, continuation lines joined."""
    joined = dockerfile.replace("\\\n", " ")
    lines = [
        ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    last_from = max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM "))
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines[last_from:]]


def test_image_matches_the_chart(helm: str) -> None:
    """The image's user, entrypoint, writable paths and ports are the ones the chart assumes."""
    stage = _final_stage((ROOT / "Dockerfile").read_text())
    instructions = {name: args for name, args in stage}
    docs = render(helm)
    pod = one(docs, "Deployment", "controller")["spec"]["template"]["spec"]
    container = pod["containers"][0]

    user, _, group = instructions["USER"].partition(":")
    assert (int(user), int(group)) == (
        pod["securityContext"]["runAsUser"],
        pod["securityContext"]["runAsGroup"],
    )
    assert yaml.safe_load(instructions["ENTRYPOINT"]) == container["command"]
    env = dict(item.split("=", 1) for item in instructions["ENV"].split())
    chart_env = {e["name"]: e.get("value") for e in container["env"]}
    for name in ("HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME", "PYTHONDONTWRITEBYTECODE"):
        assert env[name] == chart_env[name], name
        assert name == "PYTHONDONTWRITEBYTECODE" or env[name].startswith("/tmp")
    ports = {p["containerPort"] for p in container["ports"]}
    assert {int(p) for p in instructions["EXPOSE"].split()} == ports

    # What the build COPYs must survive .dockerignore (which excludes everything else).
    ignore = (ROOT / ".dockerignore").read_text().split()
    copied = [
        src
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for src in line.split()[1:-1]
    ]
    assert copied
    for src in copied:
        if src == ".":
            continue  # the whole build context, which .dockerignore itself filters
        assert f"!{src.rstrip('/')}" in [i.rstrip("/") for i in ignore], src


def test_policy_args_reach_the_policy_the_operator_builds(helm: str) -> None:
    """Chart values → rendered --policy-arg flags → the CLI → the builder → the policy object."""
    from walras.operator import main

    docs = render(
        helm,
        "--set", "policy=psdsf",
        "--set", "policyArgs.psdsf.mode=rdm",
        "--set", "policyArgs.price-discovery.backend=numpy",
    )  # fmt: skip
    container = one(docs, "Deployment", "controller")["spec"]["template"]["spec"]["containers"][0]
    args = [a.replace("$(POD_NAME)", "walras-controller-0") for a in container["args"]]
    ctx = _cli_command("operator").make_context("operator", args, resilient_parsing=False)
    options = main.Options(
        policy=ctx.params["policy"],
        policy_args=tuple(ctx.params["policy_arg"]),
        pop_shards=ctx.params["pop_shards"],
    )
    policy = policies.build(main.policy_config(options))
    assert policy.name == "psdsf"
    assert getattr(policy, "mode", None) == "rdm"
