"""Orchestration of ``python -m walras.demo``: set up, watch the rounds, draw, always tear down.

Steps (numbered as in the output): 1 start the local control plane, 2 install the CRDs, 3 create
kwok GPU nodes and one ResourcePool per GPU type, 4 submit the FungibleJobs, 5 start the real
``walras operator`` as a subprocess, 6 print jobs and pools after every round it completes,
7 write the PNG, 8 tear down. Step 8 runs in ``finally``: on success, on error and on Ctrl-C
(SIGINT) or SIGTERM. Every run starts a fresh control plane in a new temporary directory, so the
demo is re-runnable and leaves nothing behind but ``--out``.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from walras.cli import inspect_cmd
from walras.demo import cluster, real, report, workload

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Options:
    rounds: int = 10
    round_seconds: float = 3.0
    jobs: int = 30
    out: Path = Path("out")
    policy: str = "price-discovery"
    waves: int = 3
    #: None: real nodes when this machine can run them; False: kwok only.
    real_nodes: bool | None = None
    #: How long to wait, after the rounds, for the real jobs to finish.
    real_timeout_s: float = 300.0


class DemoError(RuntimeError):
    """The demo cannot go on (operator died, no round within the deadline, ...)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def operator_command(
    kubeconfig: str, options: Options, metrics_port: int, health_port: int
) -> list[str]:
    # `-c` with the console-script entry point works from any venv without relying on PATH.
    return [
        sys.executable,
        "-c",
        "from walras.cli import main; main()",
        "operator",
        "--policy",
        options.policy,
        "--round-seconds",
        f"{options.round_seconds:g}",
        # The demo's rounds are seconds long: the default 60 s minimum run would be 20 rounds
        # and no slice would rotate while a person watches.
        "--min-run-seconds",
        "0",
        "--kubeconfig",
        kubeconfig,
        "--metrics-port",
        str(metrics_port),
        "--health-port",
        str(health_port),
        "--no-leader-elect",
    ]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt so `finally` tears down exactly as on Ctrl-C."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s: only the process we started, by its own handle."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def log_tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no operator log)"


def rounds_done(metrics_port: int) -> int:
    """``walras_rounds_total`` of the operator (0 while it is not serving yet)."""
    try:
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as answer:
            body = answer.read().decode()
    except OSError:
        return 0
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "walras_rounds_total":
                return int(sample.value)
    return 0


def watch_rounds(
    console: Console,
    api: Any,
    options: Options,
    operator: subprocess.Popen[bytes],
    operator_log: Path,
    metrics_port: int,
    arrivals: Sequence[tuple[int, Sequence[workload.DemoJob]]] = (),
) -> list[report.RoundRecord]:
    """Print the tables after each round the operator completes; stop after ``options.rounds``.

    The round clock is the operator's ``walras_rounds_total``: statuses are patched only when
    they change, so ``status.round`` alone would stand still once the allocation settles. The
    operator bumps the counter after the round's status writes, so the API is current by then.
    """
    history: list[report.RoundRecord] = []
    seen = 0
    # The first round needs the operator to start and sync; later ones come every round_seconds.
    deadline = time.monotonic() + 90 + 3 * options.round_seconds
    while len(history) < options.rounds:
        if operator.poll() is not None:
            raise DemoError(
                f"the operator exited with code {operator.returncode}:\n{log_tail(operator_log)}"
            )
        if time.monotonic() > deadline:
            raise DemoError(f"no new round after round {seen}:\n{log_tail(operator_log)}")
        current = rounds_done(metrics_port)
        if current <= seen:
            time.sleep(0.2)
            continue
        seen = current
        jobs, pools = inspect_cmd.list_jobs(api), inspect_cmd.list_pools(api)
        rec = report.record(seen, jobs, pools)
        history.append(rec)
        console.rule(f"[bold]round {seen}[/bold] ({len(history)}/{options.rounds})")
        console.print(report.jobs_table(jobs, title=f"FungibleJobs after round {seen}"))
        console.print(report.pools_table(pools, title=f"ResourcePools after round {seen}"))
        shares = ", ".join(f"{t} {s:.0%}" for t, s in rec.tenant_share.items())
        console.print(f"running {rec.running}, pending {rec.pending}; tenant shares: {shares}")
        for after, batch in arrivals:
            if after == len(history):
                cluster.submit_jobs(api, batch)
                console.print(f"[cyan]submitted {len(batch)} more FungibleJobs[/cyan]")
        deadline = time.monotonic() + 30 + 3 * options.round_seconds
    return history


def run(options: Options, console: Console | None = None) -> Path:
    """The whole demo; returns the PNG path. Raises DemoError (after tearing down) on failure."""
    from walras.testing import devcluster

    console = console or Console()
    started = time.monotonic()
    options.out.mkdir(parents=True, exist_ok=True)
    operator_log = options.out / "operator.log"
    control_plane = None
    real_part: real.RealPart | None = None
    operator: subprocess.Popen[bytes] | None = None
    log_handle: IO[bytes] | None = None
    try:
        with sigterm_as_interrupt():
            console.rule("[bold]1. local control plane")
            cluster.ensure_binaries(console, REPO_ROOT)
            why_not = "--no-real-nodes" if options.real_nodes is False else real.unavailable()
            if why_not is None:
                try:
                    control_plane = devcluster.start(real_nodes=True)
                except devcluster.ControlPlaneError as exc:
                    why_not = str(exc).strip().splitlines()[-1]
            if control_plane is None:
                control_plane = devcluster.start()
            console.print(f"kube-apiserver at {control_plane.server}")
            if why_not is not None:
                console.print(f"real nodes: not used ({why_not}); every node is kwok")
            api = control_plane.admin_client()

            console.rule("[bold]2. CRDs")
            crds = sorted((REPO_ROOT / "crds").glob("*.yaml"))
            devcluster.install_crds(api, crds)
            console.print(", ".join(p.name for p in crds))

            console.rule("[bold]3. GPU nodes and ResourcePools")
            table, source = workload.load_throughputs()
            load = workload.build(options.jobs, table, source)
            cluster.create_nodes_and_pools(api, load)
            console.print(
                f"{len(load.nodes)} kwok nodes: " + ", ".join(n for n, _, _ in load.nodes)
            )
            if why_not is None:
                try:
                    real_part = real.add_nodes(control_plane, api)
                except devcluster.ControlPlaneError as exc:
                    why_not = str(exc).strip().splitlines()[-1]
                    console.print(f"real nodes: not used ({why_not}); every node is kwok")
                else:
                    console.print(
                        f"{len(real_part.nodes)} real nodes (kubelet + containerd, real "
                        f"processes, {real.GPUS} fake GPUs each, pool {real.GPU_TYPE}): "
                        + ", ".join(n.name for n in real_part.nodes)
                    )

            console.rule("[bold]4. FungibleJobs")
            console.print(f"throughputs: [green]{load.source}[/green]")
            cluster.create_namespaces(api, load)
            arrivals = workload.waves(load.jobs, options.waves, options.rounds)
            cluster.submit_jobs(api, arrivals[0][1])
            console.print(
                f"{len(load.jobs)} jobs across tenants {', '.join(workload.TENANTS)}: "
                + "; ".join(
                    f"{len(jobs)} {'now' if after == 0 else f'after round {after}'}"
                    for after, jobs in arrivals
                )
            )

            if real_part is not None:
                real.submit(control_plane, api, real_part)
                console.print(
                    f"{len(real.JOBS)} real training jobs in {real.NAMESPACE} "
                    f"(examples/workloads/train.py, {real.STEPS} steps each, gangs of 2 pods "
                    "of 2 GPUs): " + ", ".join(real.JOBS)
                )

            console.rule("[bold]5. walras operator")
            metrics_port = free_port()
            command = operator_command(
                str(control_plane.admin_kubeconfig), options, metrics_port, free_port()
            )
            log_handle = operator_log.open("wb")
            operator = subprocess.Popen(
                command, stdout=log_handle, stderr=subprocess.STDOUT, env=control_plane.env()
            )
            console.print(f"pid {operator.pid}, log {operator_log}")

            console.rule("[bold]6. rounds")
            history = watch_rounds(
                console, api, options, operator, operator_log, metrics_port, arrivals[1:]
            )

            if real_part is not None:
                console.rule("[bold]6b. real training jobs")

                def operator_alive() -> None:
                    if operator is not None and operator.poll() is not None:
                        raise DemoError(f"the operator exited:\n{log_tail(operator_log)}")

                done = real.wait_finished(
                    api,
                    options.real_timeout_s,
                    lambda line: console.print(line, markup=False, highlight=False),
                    operator_alive,
                )
                if not done:
                    console.print(f"[yellow]not all finished in {options.real_timeout_s:.0f} s")

            console.rule("[bold]kubectl get nodes,rpool,fjob -A")
            console.print(cluster.kubectl_get(control_plane), markup=False, highlight=False)

            console.rule("[bold]7. plot")
            png = report.plot(history, options.out / "demo.png")
            console.print(f"wrote {png}")
            if real_part is not None:
                steps_png = real.plot(real_part, options.out / "real-steps.png")
                console.print(f"wrote {steps_png} (real jobs' steps over time)")
            return png
    finally:
        console.rule("[bold]8. tear down")
        stop_process(operator)
        if log_handle is not None:
            log_handle.close()
        if real_part is not None:
            real_part.stop()
        if control_plane is not None:
            devcluster.stop(control_plane)
        console.print(f"done in {time.monotonic() - started:.0f} s")
