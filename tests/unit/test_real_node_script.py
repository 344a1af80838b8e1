"""hack/real-node.sh's answers to bad input, before it touches anything: exit 2 for a bad
argument (naming it), exit 1 for a directory that holds no control plane."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "real-node.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_gpu_count_must_be_a_number(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "n1", "--gpus", "four")
    assert result.returncode == 2
    assert "--gpus must be a whole number, got 'four'" in result.stderr


def test_node_name_must_be_a_dns_label(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "Node_1")
    assert result.returncode == 2
    assert "node name 'Node_1' is not a DNS-1123 label" in result.stderr


def test_unknown_option_is_named(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "n1", "--gpu", "4")
    assert result.returncode == 2
    assert "unknown argument --gpu" in result.stderr


def test_directory_without_a_control_plane(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "n1")
    assert result.returncode == 1
    assert f"{tmp_path} holds no started control plane" in result.stderr
    assert not (tmp_path / "nodes").exists()


def test_unknown_command_prints_usage() -> None:
    result = run("frobnicate")
    assert result.returncode == 2
    assert "hack/real-node.sh start DIR NAME" in result.stderr


def test_missing_runtime_is_named_in_one_line(tmp_path: Path) -> None:
    # A PATH holding only `uname`: the first missing requirement is root (when not root) or, as
    # root, containerd; either way one line saying what is missing, exit 1.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uname").symlink_to(shutil.which("uname") or "/bin/uname")
    result = subprocess.run(
        ["/bin/bash", str(SCRIPT), "check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    if os.geteuid() != 0:
        assert "real nodes need root" in lines[0]
    elif Path("/sys/fs/cgroup/cpu").is_dir():
        assert lines[0].endswith(
            "error: real nodes need containerd: run `make tools` (apt: "
            "containerd runc containernetworking-plugins buildah debootstrap)"
        )
