"""Cost of the quota accounting (``walras.core.tenant_usage.quota_round``) inside a round.

The operator's pipeline without the control plane: 40 Tenants with quotas (guaranteed 2,
maximum 6 v100 each), 400 jobs of one or two one-GPU pods, 16 nodes x 8 v100. Five rounds of
``walras.core.cycle.plan`` (price discovery, the realiser, the quota accounting), then five calls
of ``quota_round`` alone on the last round's plan. Reported (one JSON line): ``plan_cpu_s`` and
``quota_cpu_s`` per round (CPU seconds of this process, so the machine's load does not count),
their ratio, and the jobs with a quota reason in the last round.

    PYTHONPATH=src python bench/bench_tenant_usage.py
"""

from __future__ import annotations

import json
import time

from walras.core import cycle, policies, snapshot, tenant_usage

GPU = "nvidia.com/gpu"
ROUNDS = 5


def store() -> snapshot.Store:
    s = snapshot.Store()
    s.upsert("pool", {"metadata": {"name": "v100", "generation": 1}, "spec": {"gpuType": "v100"}})
    for n in range(16):
        s.upsert(
            "node",
            {
                "metadata": {"name": f"n{n}", "labels": {"walras.dev/gpu-type": "v100"}},
                "status": {
                    "allocatable": {GPU: "8", "cpu": "640", "memory": "6400Gi", "pods": "1100"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
    for t in range(40):
        quotas = {"v100": {"guaranteed": 2, "maximum": 6}}
        s.upsert(
            "tenant",
            {
                "metadata": {"name": f"t{t}", "generation": 1},
                "spec": {"namespaces": [f"t{t}"], "quotas": quotas},
            },
        )
    for j in range(400):
        meta = {"namespace": f"t{j % 40}", "name": f"j{j}", "uid": f"u{j}", "generation": 1}
        spec = {
            "replicas": 1 + j % 2,
            "throughput": {"v100": 1.0},
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        }
        s.upsert("job", {"metadata": meta, "spec": spec})
    return s


def main() -> None:
    snap = store().freeze(0.0)
    policy = policies.create("price-discovery", {"backend": "numpy"})
    state = cycle.CycleState()
    t0 = time.process_time()
    plans = [cycle.plan(state, policy, snap, now=60.0 * k, round_no=k + 1) for k in range(ROUNDS)]
    t1 = time.process_time()
    last = plans[-1]
    for _ in range(ROUNDS):
        tenant_usage.quota_round(last.snapshot, last.view, last.solution, last.realisation)
    t2 = time.process_time()
    plan_s, quota_s = (t1 - t0) / ROUNDS, (t2 - t1) / ROUNDS
    print(
        json.dumps(
            {
                "plan_cpu_s": round(plan_s, 4),
                "quota_cpu_s": round(quota_s, 4),
                "ratio": round(quota_s / plan_s, 4),
                "quota_reasons": len(last.quotas.reasons),
            }
        )
    )


if __name__ == "__main__":
    main()
