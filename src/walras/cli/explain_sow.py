"""``walras explain sow NAMESPACE/NAME``: what a StatementOfWork was posted and what happened.

Read-only, from the SoW's own status (written by ``walras.operator.sow`` from
``walras.allocator.sow.status``): per instance, the launch plan (start per arrival outcome, or
"not run"), the posted price menu ``p(τ)`` per GPU type with the bundle price
``P(s, k, d) = k Σ_{τ=s}^{s+d−1} p(τ)`` of each planned start, the posted failure estimate
``q̂(s, d)`` of each planned start, then each instance's phase, realised times and charge.
Example: a plan "arrival 12 → start 12 on a100" with ``k = 2``, ``d = 3`` and unit prices
``0.1, 0.5, 0.5`` shows price 2.2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from walras.allocator.sow import TypeDemand

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PlanRow:
    instance: int
    arrival: int
    duration: int | None  # the plan key's duration when the SoW reveals it
    gpu_type: str
    start: int | None
    price: float | None
    failure: float | None
    utility: float


def unit_price(menu: Obj, tau: int) -> float:
    """``p(τ)`` from a posted menu (``pMin`` outside the stored window)."""
    i = tau - int(menu["origin"])
    prices: Sequence[Any] = menu.get("unitPrices") or []
    return float(prices[i]) if 0 <= i < len(prices) else float(menu["pMin"])


def _point_duration(sow: Obj, arrival: int, release: int, key_duration: int | None) -> int:
    """The duration used for a plan key: the revealed one, else the likeliest at that arrival."""
    if key_duration is not None:
        return key_duration
    points = [
        p
        for p in (sow.get("spec") or {}).get("distribution") or []
        if p["arrival"] + release == arrival
    ]
    best = max(points, key=lambda p: (float(p["probability"]), -int(p["duration"])), default=None)
    return int(best["duration"]) if best else 1


def plan_rows(sow: Obj) -> list[PlanRow]:
    """One row per (instance, plan key), with the price and ``q̂`` of its planned start."""
    rows = []
    speed = (sow.get("spec") or {}).get("throughput") or {}
    for adm in (sow.get("status") or {}).get("admissions") or []:
        for e in adm.get("plan") or []:
            key_d = e.get("duration")
            start, gpu_type = e.get("start"), e.get("gpuType")
            price = failure = None
            if start is not None and gpu_type:
                d_ref = _point_duration(sow, int(e["arrival"]), int(adm["release"]), key_d)
                d = TypeDemand(gpu_type, 1, float(speed.get(gpu_type, 1.0))).duration_on(d_ref)
                table = adm["failure"][gpu_type]
                k = int(table["concurrency"])
                menu = adm["menu"][gpu_type]
                price = k * sum(unit_price(menu, t) for t in range(int(start), int(start) + d))
                i = int(start) - int(table["firstStart"])
                durations = [int(x) for x in table["durations"]]
                if d in durations and 0 <= i < len(table["q"]):
                    failure = float(table["q"][i][durations.index(d)])
            rows.append(
                PlanRow(
                    int(adm["instance"]),
                    int(e["arrival"]),
                    None if key_d is None else int(key_d),
                    str(gpu_type or "-"),
                    None if start is None else int(start),
                    price,
                    failure,
                    float(e.get("expectedUtility") or 0.0),
                )
            )
    return rows


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def render(console: Console, sow: Obj) -> None:
    meta, status = sow.get("metadata") or {}, sow.get("status") or {}
    console.print(
        f"[bold]{meta.get('namespace')}/{meta.get('name')}[/bold]  "
        f"phase={status.get('phase', 'Pending')}  birth=round {status.get('birth', '-')}  "
        f"({status.get('roundSeconds', '-')} s rounds from {status.get('epoch', '-')})"
    )
    for c in status.get("conditions") or []:
        console.print(f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}")
    if not status.get("admissions"):
        return
    console.print(
        f"Runs with probability {status.get('runProbability', 0):.3g}; posted failure estimate "
        f"{status.get('failureProbability', 0):.3g}; expected utility "
        f"{status.get('expectedUtility', 0):.4g}; charged so far {status.get('charged', 0):.4g}"
    )
    table = Table(title="Launch plan (posted at birth)")
    for column in ("Instance", "Arrival", "Duration", "GPU type", "Start", "Price", "q̂", "E\\[u]"):
        table.add_column(column, justify="left" if column == "GPU type" else "right")
    for r in plan_rows(sow):
        table.add_row(
            str(r.instance),
            str(r.arrival),
            "-" if r.duration is None else str(r.duration),
            r.gpu_type,
            "not run" if r.start is None else str(r.start),
            _fmt(r.price),
            _fmt(r.failure),
            f"{r.utility:.4g}",
        )
    console.print(table)
    first = status["admissions"][0]
    menu_table = Table(title=f"Unit prices p(τ) posted to instance 0 (from round {first['birth']})")
    menu_table.add_column("GPU type")
    menu_table.add_column("p(τ), τ = origin, origin + 1, …")
    for gpu_type, menu in sorted((first.get("menu") or {}).items()):
        prices = ", ".join(f"{float(p):.3g}" for p in (menu.get("unitPrices") or [])[:24])
        menu_table.add_row(
            gpu_type, f"origin {menu['origin']}: {prices or '-'} (then {menu['pMin']:.3g})"
        )
    console.print(menu_table)
    inst = Table(title="Instances")
    for column in (
        "Instance",
        "Phase",
        "Arrival",
        "Start",
        "GPU type",
        "Finish",
        "Charge",
        "Value",
    ):
        inst.add_column(column)
    for v in status.get("instances") or []:
        cells = ["-" if v.get(k) is None else str(v.get(k)) for k in INSTANCE_FIELDS]
        cells[1] = instance_phase(v)
        inst.add_row(
            *cells,
            f"{float(v.get('charge') or 0):.4g}",
            f"{float(v.get('value') or 0):.4g}",
        )
    console.print(inst)


INSTANCE_FIELDS = ("index", "phase", "arrival", "start", "gpuType", "finish")


def instance_phase(instance: Obj) -> str:
    """The instance's phase; a cancellation after it started (start < finish) can only be the
    mechanism's "no completion can pay any more" rule, since LIFO cancels only jobs not started."""
    phase = str(instance.get("phase") or "-")
    start, finish = instance.get("start"), instance.get("finish")
    started = start is not None and finish is not None and float(start) < float(finish)
    return f"{phase} (unprofitable)" if phase.lower() == "cancelled" and started else phase


def command(target: str, kubeconfig: str | None) -> None:
    """Fetch one StatementOfWork and render it (``walras explain sow NAMESPACE/NAME``)."""
    import typer
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from walras.kube import client as kubeclient

    namespace, sep, name = target.partition("/")
    if not sep or not namespace or not name:
        raise typer.BadParameter("expected NAMESPACE/NAME", param_hint="SOW_NAME")
    api = kubeclient.api_client(kubeconfig)
    try:
        obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "walras.dev", "v1alpha1", namespace, "statementsofwork", name
        )
    except ApiException as exc:
        if exc.status == 404:
            typer.secho(f"StatementOfWork {namespace}/{name} not found", err=True, fg="red")
            raise typer.Exit(1) from exc
        raise
    render(Console(), obj)
