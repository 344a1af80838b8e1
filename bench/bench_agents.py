"""Node agents against the real API server: convergence time and API traffic vs number of agents.

One JSON line per case (``DEFAULT_CASES``: 100 and 500 agents; τ = 1 s and the other shipped
defaults unless a case says otherwise). Agents are simulated as concurrent asyncio tasks in a few
worker processes (each step runs the real ``walras.agent.runner.Agent.step`` in a thread pool;
agents of one worker share one ``SharedReads``: informers, or polling for ``legacy``), the
aggregator is a real ``walras agent --aggregate`` process. Nodes are kwok nodes of 3 GPU types
(``mixed``: of varied sizes); 6 tenants, two restricted by a node label. ``legacy`` runs the
previous agents in the same run for a ratio: damped water-fill, polling reads, aggregator
publishing every 0.1 s.

Fields: ``converge_s`` (from starting the workers until the published totals stay within 1e-3 of
``fairness.solve``; null if not within ``timeout_s``), ``steps_per_agent`` (mean agent steps
until then), ``api_writes_per_agent_step`` / ``api_requests_per_agent_step`` (until
convergence), ``steady_writes_per_agent_step`` and ``steady_requests_per_agent_s`` (API requests
of the agents per agent per second over ``STEADY_S`` seconds after convergence; LISTs and WATCH
starts count), ``settled_requests_per_agent_s`` / ``settled_writes_per_agent_s`` (the same,
``SETTLE_S`` seconds later, once the agents have tightened to their write tolerance: heartbeats),
``agent_latency_s`` (mean read-to-write seconds of the agents' last write),
``aggregator_period_s`` (published staleness). The machine is shared: times
include waiting for the CPU (``load_avg_1m``).

Run: ``python bench/bench_agents.py`` (starts its own control plane; needs ``make tools``).
``python bench/bench_agents.py 100 100:mixed:legacy 100@2`` runs a subset (``N@θ₀``: base θ₀).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CRDS = [REPO / "crds" / f for f in ("fungiblejob.yaml", "resourcepool.yaml", "nodeallocation.yaml")]
BASE = "/apis/walras.dev/v1alpha1"
WALRAS = str(Path(sys.executable).parent / "walras")
TYPES = (("a100", 8), ("v100", 4), ("t4", 4))
TENANTS = {
    "vision": ({"a100": 4.0, "v100": 2.5, "t4": 1.0}, 1, "4", 1.0, {}),
    "nlp": ({"a100": 3.0, "v100": 1.5}, 2, "8", 2.0, {}),
    "rl": ({"t4": 1.0, "v100": 1.2}, 1, "16", 1.0, {}),
    "east": ({"a100": 2.0, "v100": 2.0, "t4": 2.0}, 1, "2", 1.0, {"zone": "east"}),
    "speech": ({"a100": 2.0, "t4": 1.5}, 1, "4", 1.0, {}),
    "gan": ({"a100": 3.5, "v100": 3.0}, 1, "4", 1.5, {"zone": "east"}),
}
# Churn after the steady state: a tenant whose job runs on every type arrives.
LATE = ("late", ({"a100": 1.0, "v100": 1.0, "t4": 1.0}, 1, "4", 1.0, {}))
TOL = 1e-3
STEADY_S = 10.0
SETTLE_S = 30.0
# "N[@theta][:mixed][:legacy]": N agents, base damping theta, varied node sizes, the previous
# agents (damped water-fill, polling reads, aggregator publishing every 0.1 s).
DEFAULT_CASES = ("100", "500", "100:mixed", "100:mixed:legacy", "500:mixed", "500:mixed:legacy")


def parse_case(text: str) -> tuple[int, float | None, bool, bool, frozenset[str]]:
    """``N[@θ₀][:mixed][:legacy][:noback][:nopace]``; the last two switch off the agents'
    period back-off and per-tenant pace (for comparison)."""
    head, *flags = text.split(":")
    n, _, theta = head.partition("@")
    off = frozenset(f for f in flags if f in ("noback", "nopace"))
    return int(n), float(theta) if theta else None, "mixed" in flags, "legacy" in flags, off


# ---------------------------------------------------------------------------------- worker


def worker(
    kubeconfig: str,
    nodes: list[str],
    stop_file: str,
    out: str,
    damping: float,
    legacy: bool,
    off: frozenset[str] = frozenset(),
) -> None:
    """Run ``nodes``' agents as asyncio tasks until ``stop_file`` exists; dump counters to ``out``
    every second. ``legacy``: the previous agents (damped water-fill, polling reads)."""
    import threading

    from walras.agent.runner import Agent, AgentConfig, SharedReads
    from walras.kube.agents import Kube
    from walras.testing import devcluster

    api = devcluster.new_client(kubeconfig)
    api.configuration.connection_pool_maxsize = 32
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 32
    kube = Kube(api)
    stop = threading.Event()
    if legacy:
        reads = SharedReads(kube, ttl=1.0, totals_ttl=0.05)
    else:
        reads = SharedReads(kube, watch=True, nodes=nodes, stop=stop)
    method = "waterfill" if legacy else "scaled"
    agents = [
        Agent(
            kube,
            AgentConfig(
                node_name=n,
                damping=damping,
                method=method,
                back_off="noback" not in off,
                pace="nopace" not in off,
            ),
            reads,
        )
        for n in nodes
    ]
    counters = {"steps": 0, "wrote": 0, "skipped": 0, "errors": 0}
    # Watching, a step may wait (on a condition, no CPU) for the totals that include its own
    # last write; enough threads that those waits do not hold back the other agents.
    pool = ThreadPoolExecutor(max_workers=12 if legacy else 256)

    async def one(agent: Agent) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(agent.rng.uniform(0.0, agent.config.tau))
        while not os.path.exists(stop_file):
            started = time.monotonic()
            try:
                outcome = await loop.run_in_executor(pool, agent.step)
                counters["steps"] += 1
                counters["wrote"] += int(outcome.wrote)
                counters["skipped"] += int(outcome.skipped is not None)
            except Exception:  # count and go on, as the real loop does
                counters["errors"] += 1
            await asyncio.sleep(max(0.0, agent.next_delay() - (time.monotonic() - started)))

    async def dump() -> None:
        while not os.path.exists(stop_file):
            data = {**counters, "reads": kube.reads, "writes": kube.writes, "t": time.time()}
            data["latency_sum"] = sum(a.latency for a in agents)
            Path(out + ".tmp").write_text(json.dumps(data))
            os.replace(out + ".tmp", out)
            await asyncio.sleep(0.5)

    async def main() -> None:
        await asyncio.gather(dump(), *(one(a) for a in agents))

    asyncio.run(main())
    stop.set()
    data = {**counters, "reads": kube.reads, "writes": kube.writes, "t": time.time()}
    Path(out).write_text(json.dumps(data))
    pool.shutdown()


# ------------------------------------------------------------------------------------ main


def setup(kube: Any, n_nodes: int, mixed: bool = False) -> list[str]:
    """Pools, kwok nodes and the six tenants' jobs. ``mixed``: node sizes vary (GPUs: the
    type's count or half of it; CPUs 16, 32 or 64, seeded), so no node's first answer is already
    the fair one and the agents must actually iterate."""
    import random

    from walras.testing import devcluster

    rng = random.Random(15)

    devcluster.reset(kube)
    devcluster.install_crds(kube, CRDS)
    # A job's tenant is its namespace (walras.core.governance; no Tenant objects here): one
    # namespace per tenant, or all jobs would be one tenant and the problem trivial.
    for tenant in [*TENANTS, LATE[0]]:
        devcluster.create_namespace(kube, tenant)
    names = []
    for gpu_type, _ in TYPES:
        body = {
            "apiVersion": "walras.dev/v1alpha1",
            "kind": "ResourcePool",
            "metadata": {"name": gpu_type},
            "spec": {"gpuType": gpu_type, "nodeSelector": {"walras.dev/gpu-type": gpu_type}},
        }
        devcluster.request(kube, "POST", f"{BASE}/resourcepools", body=body)
    for k in range(n_nodes):
        gpu_type, gpus = TYPES[k % 3]
        name = f"{gpu_type}-{k}"
        zone = "east" if (k // 3) % 2 == 0 else "west"
        cpu = "32"
        if mixed:
            gpus = rng.choice([gpus, gpus // 2])
            cpu = rng.choice(["16", "32", "64"])
        devcluster.create_gpu_node(
            kube, name, gpu_type=gpu_type, gpus=gpus, cpu=cpu, labels={"zone": zone}, wait=False
        )
        names.append(name)
    devcluster.wait_nodes_ready(kube, names, timeout=300)
    for tenant, spec_row in TENANTS.items():
        create_job(kube, tenant, spec_row, n_nodes)
    return names


def create_job(kube: Any, tenant: str, row: tuple[Any, ...], n_nodes: int) -> None:
    from walras.testing import devcluster

    throughput, gpus, cpu, weight, selector = row
    container = {
        "name": "train",
        "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": cpu}},
    }
    spec: dict[str, Any] = {"containers": [container]}
    if selector:
        spec["nodeSelector"] = selector
    job = {
        "apiVersion": "walras.dev/v1alpha1",
        "kind": "FungibleJob",
        "metadata": {"name": f"{tenant}-job", "namespace": tenant},
        "spec": {
            "replicas": min(10 * n_nodes, 4096),  # caps never bind (schema max 4096)
            "throughput": throughput,
            "template": {"spec": spec},
            "utility": {"kind": "log", "weight": weight},
            "tenant": tenant,
        },
    }
    devcluster.request(kube, "POST", f"{BASE}/namespaces/{tenant}/fungiblejobs", body=job)


def reference(kube: Any) -> dict[str, float]:
    from walras.allocator import fairness
    from walras.core.tenants import psdsf_problem
    from walras.testing import devcluster

    jobs = devcluster.request(kube, "GET", f"{BASE}/fungiblejobs")["items"]
    pools = devcluster.request(kube, "GET", f"{BASE}/resourcepools")["items"]
    nodes = devcluster.request(kube, "GET", "/api/v1/nodes")["items"]
    problem, tenants, _ = psdsf_problem(jobs, nodes, pools)
    result = fairness.solve(problem)
    return {t: float(v) for t, v in zip(tenants, result.totals, strict=True)}


def published(kube: Any) -> dict[str, Any]:
    from walras.testing import devcluster

    try:
        obj = devcluster.request(kube, "GET", f"{BASE}/nodeallocations/walras-tenant-totals")
    except Exception:  # not published yet
        return {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def rel_error(got: dict[str, float], want: dict[str, float]) -> float:
    scale = max([*want.values(), 1e-12])
    return (
        max(abs(float(got.get(t, 0.0)) - w) / max(w, 1e-9 * scale) for t, w in want.items())
        if want
        else 0.0
    )


def wait_converged(
    kube: Any, want: dict[str, float], start: float, timeout: float
) -> tuple[float | None, float]:
    """Seconds from ``start`` until 3 consecutive polls (0.1 s apart) of the published totals
    are within TOL of ``want`` (None after ``timeout``), and the last error."""
    streak, first_ok, err = 0, None, float("inf")
    trace = os.environ.get("WALRAS_AGENTS_TRACE")  # optional: the error over time, one line a poll
    while time.monotonic() - start < timeout:
        status = published(kube)
        err = rel_error({k: float(v) for k, v in (status.get("tasks") or {}).items()}, want)
        if trace:
            row = {"t": round(time.monotonic() - start, 2), "err": err, "want": want}
            row.update({k: status.get(k) for k in ("tasks", "period", "iteration", "nodeCount")})
            with open(trace, "a") as f:
                f.write(json.dumps(row) + "\n")
        if err <= TOL:
            streak += 1
            first_ok = first_ok if first_ok is not None else time.monotonic()
            if streak >= 3:
                return first_ok - start, err
        else:
            streak, first_ok = 0, None
        time.sleep(0.1)
    return None, err


def read_counters(paths: list[str]) -> dict[str, float]:
    total = {
        "steps": 0.0,
        "wrote": 0.0,
        "skipped": 0.0,
        "errors": 0.0,
        "reads": 0.0,
        "writes": 0.0,
        "latency_sum": 0.0,
    }
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        for key in total:
            total[key] += float(data.get(key, 0))
    return total


def run_case(
    cp: Any,
    kube: Any,
    n_agents: int,
    workers: int,
    timeout: float,
    damping: float,
    *,
    mixed: bool = False,
    legacy: bool = False,
    off: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    names = setup(kube, n_agents, mixed)
    want = reference(kube)
    # CPU of this case's child processes (agent workers, aggregator), counted once they exit.
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    work = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    stop_file = str(work / "stop")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(work / "aggregator.log", "wb") as log:
        agg = subprocess.Popen(
            [WALRAS, "agent", "--aggregate", "--kubeconfig", cp.admin_kubeconfig]
            + (["--no-watch"] if legacy else []),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    outs = [str(work / f"worker-{w}.json") for w in range(workers)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                cp.admin_kubeconfig,
                ",".join(names[w::workers]),
                stop_file,
                outs[w],
                str(damping),
                "1" if legacy else "0",
                ",".join(sorted(off)),
            ],
            env=env,
        )
        for w in range(workers)
    ]
    start = time.monotonic()
    converged_at, err = wait_converged(kube, want, start, timeout)
    at_convergence = read_counters(outs)
    period = float(published(kube).get("period") or 0.0)
    # Steady state: a short settling pause, then API requests over a measured window.
    time.sleep(2.0)
    before_steady, steady_start = read_counters(outs), time.monotonic()
    time.sleep(STEADY_S)
    after = read_counters(outs)
    steady_s = time.monotonic() - steady_start
    steady_requests = (after["reads"] + after["writes"]) - (
        before_steady["reads"] + before_steady["writes"]
    )
    # Settled: right after 1e-3 the agents still tighten towards their write tolerance (1e-5);
    # SETTLE_S seconds later, what a converged cluster costs (heartbeats, watch restarts).
    time.sleep(SETTLE_S)
    before_settled, settled_start = read_counters(outs), time.monotonic()
    time.sleep(STEADY_S)
    settled = read_counters(outs)
    settled_s = time.monotonic() - settled_start
    settled_requests = (settled["reads"] + settled["writes"]) - (
        before_settled["reads"] + before_settled["writes"]
    )
    # Re-convergence of warm agents after a tenant arrives: the algorithm, not process start.
    create_job(kube, LATE[0], LATE[1], n_agents)
    churn_start = time.monotonic()
    churn_at, churn_err = wait_converged(kube, reference(kube), churn_start, timeout)
    after_churn = read_counters(outs)
    Path(stop_file).touch()
    for proc in [*procs, agg]:
        if proc is agg:
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    children_cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (
        cpu_before.ru_utime + cpu_before.ru_stime
    )
    steps = max(at_convergence["steps"], 1.0)
    steady_steps = max(after["steps"] - at_convergence["steps"], 1.0)
    suffix = ("_mixed" if mixed else "") + ("_legacy" if legacy else "")
    suffix += "".join(f"_{f}" for f in sorted(off))
    return {
        "bench": "agents",
        "case": f"{n_agents}_agents{suffix}",
        "method": "waterfill+poll" if legacy else "scaled+watch",
        "agents": n_agents,
        "worker_processes": workers,
        "tau_s": 1.0,
        "damping": damping,
        "converged": converged_at is not None,
        "converge_s": None if converged_at is None else round(converged_at, 2),
        "time_s": None if converged_at is None else round(converged_at, 2),
        # Whole case (start, convergence, steady window, churn): agents' and aggregator's CPU.
        "cpu_s": round(children_cpu, 2),
        "final_rel_error": float(f"{err:.3g}"),
        "timeout_s": timeout,
        "steps_per_agent": round(steps / n_agents, 2),
        "skipped_per_agent_step": round(at_convergence["skipped"] / steps, 3),
        "api_writes_per_agent_step": round(at_convergence["writes"] / steps, 3),
        "api_requests_per_agent_step": round(
            (at_convergence["writes"] + at_convergence["reads"]) / steps, 3
        ),
        "steady_writes_per_agent_step": round(
            (after["writes"] - at_convergence["writes"]) / steady_steps, 3
        ),
        "steady_requests_per_agent_s": round(steady_requests / n_agents / steady_s, 4),
        "reconverge_s": None if churn_at is None else round(churn_at, 2),
        "settled_requests_per_agent_s": round(settled_requests / n_agents / settled_s, 4),
        "settled_writes_per_agent_s": round(
            (settled["writes"] - before_settled["writes"]) / n_agents / settled_s, 4
        ),
        "reconverge_steps_per_agent": round(
            (after_churn["steps"] - settled["steps"]) / n_agents, 2
        ),
        "reconverge_final_rel_error": float(f"{churn_err:.3g}"),
        "step_errors": int(after["errors"]),
        "aggregator_period_s": round(period, 3),
        # Mean read-to-write seconds of the agents' last written step, at convergence (or timeout).
        "agent_latency_s": round(at_convergence["latency_sum"] / n_agents, 3),
        # The machine is shared: a 1-minute load average far above the core count slows all.
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "cpu_count": os.cpu_count(),
    }


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--worker":
        off = frozenset(f for f in argv[7].split(",") if f) if len(argv) > 7 else frozenset()
        worker(argv[1], argv[2].split(","), argv[3], argv[4], float(argv[5]), argv[6] == "1", off)
        return 0
    from walras.testing import devcluster

    cases = [parse_case(a) for a in argv] or [parse_case(a) for a in DEFAULT_CASES]
    if not devcluster.binaries_available():
        print(json.dumps({"bench": "agents", "error": "control plane binaries not built"}))
        return 0
    cp = devcluster.start()
    try:
        kube = devcluster.new_client(cp.admin_kubeconfig)
        from walras.agent.steps import DEFAULT_DAMPING

        for n, theta, mixed, legacy, off in cases:
            workers, timeout = (1, 60.0) if n <= 20 else (2, 60.0) if n <= 100 else (2, 90.0)
            damping = DEFAULT_DAMPING if theta is None else theta
            result = run_case(
                cp, kube, n, workers, timeout, damping, mixed=mixed, legacy=legacy, off=off
            )
            print(json.dumps(result), flush=True)
        devcluster.reset(kube)
    finally:
        devcluster.stop(cp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
