"""Benchmark of the container image: build time, size, and the operator's start-up inside it.

Builds the CPU image with ``hack/build-image.sh`` (buildah; see that script) from a copy of the
build context (Dockerfile, .dockerignore, pyproject.toml, README.md, src/, locks/, the script)
into a fresh image store in a temporary directory, so that neither the checkout nor the
developer's store is touched. The Debian base root filesystem comes from the shared cache
($WALRAS_CACHE/image-base, made once by debootstrap), as it would on any machine that built the
image before. One JSON line per case:

* ``build_cold``: empty store: commit the base, then every step of the Dockerfile (apt inside the
  image, every wheel downloaded); ``size_mb`` is the image's uncompressed size.
* ``build_cached``: the same inputs again: the script sees the inputs' hash unchanged, no build.
* ``build_source_change``: one source file changed: the dependency layers are reused, walras
  itself is reinstalled and the runtime stage redone.
* ``operator_startup``: seconds from ``buildah run ... walras operator`` (uid 65532, host network)
  to its first ``/healthz`` 200 against the local control plane, and to its first round; skipped
  without the control plane's binaries.

``time_s`` is wall time, ``cpu_s`` the CPU time of the finished child processes (buildah and what
it ran). Takes several minutes (the cold build dominates: Debian packages and ~100 MB of wheels).
Needs root and buildah (`make tools`); otherwise prints one ``skipped`` line.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = (
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "README.md",
    "src",
    "locks",
    "hack/build-image.sh",
)


def emit(case: str, **values: Any) -> None:
    print(json.dumps({"bench": "image", "case": case, **values}), flush=True)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build(context: Path, store: Path) -> tuple[dict[str, str], float, float]:
    """hack/build-image.sh in ``context`` with its store in ``store``: (report, wall s, CPU s)."""
    env = {**os.environ, "WALRAS_IMAGE_ENGINE": "buildah", "WALRAS_IMAGE_STORE": str(store)}
    t0, c0 = time.perf_counter(), children_cpu()
    proc = subprocess.run(
        ["bash", str(context / "hack" / "build-image.sh"), "--tag", "walras:bench"],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        check=False,
    )
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    report = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return report, wall, cpu


def http_status(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""
    except OSError:
        return 0, ""


def operator_startup(report: dict[str, str], tmp: Path) -> None:
    from walras.testing import devcluster

    if not devcluster.binaries_available():
        emit("operator_startup", skipped="control plane binaries not built: run `make tools`")
        return
    buildah = ["buildah", *report["buildah_flags"].split()]
    name = f"walras-bench-{os.getpid()}"
    subprocess.run([*buildah, "from", "--pull=never", "--name", name, report["image"]], check=True,
                   capture_output=True)  # fmt: skip
    cp = devcluster.start()
    container_tmp = tmp / "container-tmp"
    container_tmp.mkdir()
    container_tmp.chmod(0o1777)
    try:
        # The CA file is outside the container: inline it.
        kubeconfig = yaml.safe_load(Path(cp.admin_kubeconfig).read_text())
        for cluster in kubeconfig["clusters"]:
            ca = cluster["cluster"].pop("certificate-authority", None)
            if ca:
                data = base64.b64encode(Path(ca).read_bytes()).decode()
                cluster["cluster"]["certificate-authority-data"] = data
        (container_tmp / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        (container_tmp / "kubeconfig").chmod(0o644)
        api = devcluster.new_client(cp.admin_kubeconfig)
        devcluster.install_crds(api, sorted((ROOT / "crds").glob("*.yaml")))
        api.close()
        port = 18000 + os.getpid() % 1000
        command = [
            *buildah, "run", "--isolation", "chroot", "--network", "host",
            "--user", "65532:65532", "--volume", f"{container_tmp}:/tmp:rw", name, "--",
            "walras", "operator", "--no-leader-elect", "--round-seconds", "1",
            "--kubeconfig", "/tmp/kubeconfig",
            "--health-port", str(port), "--metrics-port", str(port),
        ]  # fmt: skip
        t0, c0 = time.perf_counter(), children_cpu()
        log = (tmp / "operator.log").open("wb")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
        healthy = first_round = None
        try:
            while time.perf_counter() - t0 < 300 and process.poll() is None:
                now = time.perf_counter() - t0
                if healthy is None and http_status(port, "/healthz")[0] == 200:
                    healthy = now
                if healthy is not None:
                    body = http_status(port, "/metrics")[1]
                    if any(
                        line.startswith("walras_rounds_total ") and float(line.split()[1]) >= 1
                        for line in body.splitlines()
                    ):
                        first_round = now
                        break
                time.sleep(0.05)
        finally:
            if process.poll() is None:
                os.killpg(os.getpgid(process.pid), signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(os.getpgid(process.pid), signal.SIGKILL)
                    process.wait(timeout=10)
            log.close()
        if healthy is None or first_round is None:
            tail = (tmp / "operator.log").read_text(errors="replace")[-2000:]
            emit("operator_startup", error=f"no /healthz or round within 300 s: {tail}")
            return
        emit(
            "operator_startup",
            time_s=round(healthy, 2),
            first_round_s=round(first_round, 2),
            cpu_s=round(children_cpu() - c0, 2),
        )
    finally:
        devcluster.stop(cp)
        subprocess.run([*buildah, "rm", name], check=False, capture_output=True)


def main() -> int:
    if os.geteuid() != 0 or shutil.which("buildah") is None or shutil.which("debootstrap") is None:
        emit("build_cold", skipped="needs root, buildah and debootstrap (`make tools`)")
        return 0
    with tempfile.TemporaryDirectory(prefix="walras-bench-image-") as name:
        tmp = Path(name)
        context, store = tmp / "context", tmp / "store"
        for item in CONTEXT:
            source, target = ROOT / item, context / item
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, target)
        flags: list[str] = []
        try:
            report, wall, cpu = build(context, store)
            flags = report["buildah_flags"].split()
            size_mb = round(int(report["size_bytes"]) / 1e6, 1)
            emit("build_cold", time_s=round(wall, 1), cpu_s=round(cpu, 1), size_mb=size_mb)
            report, wall, cpu = build(context, store)
            assert report["cached"] == "1", report
            emit("build_cached", time_s=round(wall, 2), cpu_s=round(cpu, 2), size_mb=size_mb)
            with (context / "src" / "walras" / "__init__.py").open("a") as handle:
                handle.write("# bench: a source change\n")
            report, wall, cpu = build(context, store)
            emit(
                "build_source_change",
                time_s=round(wall, 1),
                cpu_s=round(cpu, 1),
                size_mb=round(int(report["size_bytes"]) / 1e6, 1),
            )
            operator_startup(report, tmp)
        finally:
            # The store holds root-owned layers (and, with overlay, mounts): buildah removes them.
            if flags:
                for args in (["rm", "--all"], ["rmi", "--all", "--force"]):
                    subprocess.run(["buildah", *flags, *args], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
