"""The shipped image, built here from the shipped Dockerfile and run for real .

``hack/build-image.sh`` builds the CPU image with buildah (chroot isolation; this
machine has no Docker engine), from a debian:bookworm-slim it makes with debootstrap. An image of
unchanged inputs (Dockerfile, pyproject, README, src) is reused, and a source change reuses the
dependency layers, so only the first build is slow.

The tests then run programs from the image's own filesystem with ``buildah run``: the console
script, the image's configuration, and the operator against the local control plane, where it must
bind a FungibleJob's pod to a kwok GPU node and write the job's status. The operator runs as the
chart's pod would: uid 65532, host networking (the apiserver listens on loopback), the root
filesystem read-only and only /tmp writable. The read-only root is a private mount namespace in
which the container's root directory is bind-mounted read-only onto itself before ``buildah run``
chroots into it (and /run, where buildah makes a mount point at every start, is a root-owned
tmpfs); a test proves that writes outside /tmp fail there.

buildah and debootstrap come from ``make tools`` (hack/install-tools.sh). Without them, or without
root, the tests skip, and fail when WALRAS_REQUIRE_APISERVER=1 (CI).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tomllib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_helpers import (
    create_job,
    create_nodes,
    create_pool,
    free_port,
    get_job,
    http_get,
    install,
    job_manifest,
    list_pods,
    pool_manifest,
    wait_for,
)
from prometheus_client.parser import text_string_to_metric_families

from walras.testing import devcluster

# The first build downloads Debian's packages and every wheel: far longer than the default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
UID = 65532  # the Dockerfile's USER, and the chart's runAsUser
GPU_TYPE = "imagetest"  # a GPU type no other test uses
NODE = "image-gpu-0"


@dataclass(frozen=True)
class Image:
    """What hack/build-image.sh reported."""

    name: str
    id: str
    size_bytes: int
    buildah: tuple[str, ...]  # `buildah` with the global flags that reach the script's store


def build_image(*args: str) -> dict[str, str]:
    """Run hack/build-image.sh with buildah; its key=value report as a dict."""
    env = {**os.environ, "WALRAS_IMAGE_ENGINE": "buildah"}
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-image.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=2300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def _require(condition: bool, message: str) -> None:
    if condition:
        return
    if os.environ.get("WALRAS_REQUIRE_APISERVER") == "1":
        pytest.fail(message + " [WALRAS_REQUIRE_APISERVER=1]", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def image() -> Image:
    missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
    _require(not missing, f"{' and '.join(missing)} not installed: run `make tools`")
    _require(os.geteuid() == 0, "buildah here needs root (chroot isolation, a store of its own)")
    report = build_image("--variant", "cpu")
    assert report["engine"] == "buildah"
    return Image(
        name=report["image"],
        id=report["id"],
        size_bytes=int(report["size_bytes"]),
        buildah=("buildah", *report["buildah_flags"].split()),
    )


@dataclass(frozen=True)
class Container:
    image: Image
    name: str
    rootfs: str

    def command(
        self, args: Sequence[str], *, user: str | None = None, volumes: Sequence[str] = ()
    ) -> list[str]:
        """``buildah run`` of ``args`` in this container: chroot isolation, host network."""
        run = [*self.image.buildah, "run", "--isolation", "chroot", "--network", "host"]
        if user is not None:
            run += ["--user", user]
        for volume in volumes:
            run += ["--volume", volume]
        return [*run, self.name, "--", *args]

    def sandboxed(self, args: Sequence[str], tmp: Path) -> list[str]:
        """``args`` as uid 65532 with the root filesystem read-only and ``tmp`` on /tmp.

        /run is a root-owned tmpfs, as podman's ``--read-only`` makes it: ``buildah run`` creates
        its /run/.containerenv mount point at every start.
        """
        script = (
            'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
            '&& mount -t tmpfs -o mode=0755,size=16m tmpfs "$1/run" && shift && exec "$@"'
        )
        inner = self.command(args, user=f"{UID}:{UID}", volumes=[f"{tmp}:/tmp:rw"])
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
        return [*unshare, self.rootfs, *inner]


def run(cmd: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def container(image: Image) -> Iterator[Container]:
    name = f"walras-test-{uuid.uuid4().hex[:8]}"
    made = run([*image.buildah, "from", "--pull=never", "--name", name, image.name])
    assert made.returncode == 0, made.stderr
    try:
        mounted = run([*image.buildah, "mount", name])
        assert mounted.returncode == 0, mounted.stderr
        # One writable run first: buildah creates the mount points it needs (/etc/hosts,
        # /etc/resolv.conf, ...) in the container's layer, which the read-only runs cannot.
        first = run(Container(image, name, "").command(["true"]))
        assert first.returncode == 0, first.stderr
        yield Container(image, name, mounted.stdout.strip())
    finally:
        run([*image.buildah, "umount", name])
        run([*image.buildah, "rm", name])


@pytest.fixture
def sandbox_tmp(tmp_path: Path) -> Path:
    """A directory for the container's /tmp, writable by uid 65532 (like the chart's emptyDir)."""
    path = tmp_path / "container-tmp"
    path.mkdir()
    path.chmod(0o1777)
    return path


def pyproject_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        version: str = tomllib.load(handle)["project"]["version"]
    return version


# ---- the image ----------------------------------------------------------------------------------


def test_image_configuration_is_the_dockerfiles(image: Image) -> None:
    inspected = run([*image.buildah, "inspect", "--type", "image", image.name])
    assert inspected.returncode == 0, inspected.stderr
    config = json.loads(inspected.stdout)["OCIv1"]["config"]
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["walras", "operator"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["OPENBLAS_NUM_THREADS"] == "1"
    assert env["HOME"] == "/tmp"
    assert env["PATH"].startswith("/opt/walras/bin:")
    assert config["Labels"]["dev.walras.variant"] == "cpu"
    assert image.size_bytes > 0


def test_walras_version_in_the_image(container: Container) -> None:
    proc = run(container.command(["walras", "--version"]))
    if "No such option: --version" in proc.stdout + proc.stderr:
        pytest.xfail("the CLI has no --version option yet (src/walras/cli/app.py)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert pyproject_version() in proc.stdout


def test_installed_distribution_is_this_checkouts(container: Container) -> None:
    script = "import importlib.metadata as m; print(m.version('walras'))"
    proc = run(container.command(["python", "-c", script]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == pyproject_version()


def test_operator_help_in_the_image(container: Container) -> None:
    proc = run(container.command(["walras", "operator", "--help"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for flag in ("--policy", "--round-seconds", "--kubeconfig", "--health-port"):
        assert flag in proc.stdout


def test_cpu_image_has_no_torch(container: Container) -> None:
    # Asked of the import system and printed on stdout: a failed `import torch` would only say
    # "no torch" through the container's stderr, which buildah does not always pass through.
    script = "import importlib.util as u; print(u.find_spec('torch') is None)"
    proc = run(container.command(["python", "-c", script]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_sandbox_is_read_only_outside_tmp_and_not_root(
    container: Container, sandbox_tmp: Path
) -> None:
    script = (
        "id -u; touch /tmp/probe && echo tmp-writable; "
        "touch /opt/walras/probe 2>&1; touch /etc/probe 2>&1; touch /run/probe 2>&1; true"
    )
    proc = run(container.sandboxed(["sh", "-c", script], sandbox_tmp))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == str(UID)
    assert "tmp-writable" in lines
    assert proc.stdout.count("Read-only file system") == 2, proc.stdout
    assert "/run/probe': Permission denied" in proc.stdout  # root's tmpfs, not the user's
    assert (sandbox_tmp / "probe").exists()


# ---- the operator from the image, against the local control plane --------------------------------


def _self_contained(kubeconfig: str) -> str:
    """The kubeconfig with its CA inlined (the CA file's directory is not in the container)."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for cluster in config["clusters"]:
        ca = cluster["cluster"].pop("certificate-authority", None)
        if ca is not None:
            data = base64.b64encode(Path(ca).read_bytes()).decode()
            cluster["cluster"]["certificate-authority-data"] = data
    return str(yaml.safe_dump(config))


@dataclass
class Operator:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-6000:] if self.log.exists() else ""


def start_operator_in_image(
    container: Container, control_plane: devcluster.ControlPlane, tmp: Path, log: Path
) -> Operator:
    """``walras operator`` from the image in the sandbox; returns once it serves /healthz."""
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(_self_contained(control_plane.admin_kubeconfig))
    kubeconfig.chmod(0o644)
    port = free_port()
    args = [
        "walras", "operator",
        "--no-leader-elect",
        "--policy", "price-discovery",
        "--round-seconds", "1",
        "--policy-arg", "price-discovery.backend=numpy",
        "--kubeconfig", "/tmp/kubeconfig",
        "--health-port", str(port),
        "--metrics-port", str(port),
    ]  # fmt: skip
    with log.open("wb") as handle:
        # A session of its own, so that teardown can signal buildah and the operator together.
        process = subprocess.Popen(
            container.sandboxed(args, tmp),
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    operator = Operator(process, port, log)

    def serving() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"operator exited with {process.returncode}:\n{operator.log_text()}")
        return http_get(port, "/healthz")[0] == 200

    wait_for(serving, 180, "the operator in the image to serve /healthz")
    return operator


def stop(operator: Operator) -> None:
    if operator.process.poll() is not None:
        return
    group = os.getpgid(operator.process.pid)
    os.killpg(group, signal.SIGTERM)
    try:
        operator.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(group, signal.SIGKILL)
        operator.process.wait(timeout=10)


@pytest.fixture
def operator(
    container: Container,
    control_plane: devcluster.ControlPlane,
    kube: Any,
    sandbox_tmp: Path,
    tmp_path: Path,
) -> Iterator[Operator]:
    install(kube)
    running = start_operator_in_image(container, control_plane, sandbox_tmp, tmp_path / "op.log")
    try:
        yield running
    finally:
        stop(running)
        devcluster.reset(kube)


def test_operator_from_the_image_binds_a_pod_and_writes_status(
    kube: Any, operator: Operator
) -> None:
    create_nodes(kube, "image-gpu", GPU_TYPE, 1, 4)
    create_pool(kube, pool_manifest(GPU_TYPE, GPU_TYPE))
    namespace = devcluster.unique_name("t-image")
    devcluster.create_namespace(kube, namespace)
    create_job(kube, namespace, job_manifest("image-job", {GPU_TYPE: 1.0}, gpus=1))

    def bound() -> list[str]:
        return [
            p["spec"]["nodeName"]
            for p in list_pods(kube, namespace, "image-job")
            if p["spec"].get("nodeName")
        ]

    nodes = wait_for(bound, 120, "a bound pod of image-job")
    assert nodes == [NODE], operator.log_text()
    status = wait_for(
        lambda: (get_job(kube, namespace, "image-job").get("status") or {}).get("allocation"),
        120,
        "an allocation in image-job's status",
    )
    assert [a["gpuType"] for a in status] == [GPU_TYPE], operator.log_text()
    code, body = http_get(operator.port, "/metrics")
    assert code == 200
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert samples["walras_rounds_total"] >= 1
    assert samples["walras_bindings_total"] == 1, body[-3000:]  # one pod, bound once
    assert operator.process.poll() is None, operator.log_text()
